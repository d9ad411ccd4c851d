// Our own declarations of the cuDNN 9 functions, enum values and struct that vm/cuda/cudnn.cpp
// and vm/cuda/cudnn_graph.cpp use (cudnn_graph.h, cudnn_ops.h, cudnn_cnn.h): no build-time cuDNN
// dependency.
// tests/cpp/test_cudnn.cpp checks them against the real headers where those are installed.
#pragma once
#include <cstddef>
#include <cstdint>

#include "vm/cuda/driver.hpp"

namespace cr::cuda::cudnn_api {

using Status = int;        // cudnnStatus_t
using Handle = void*;      // cudnnHandle_t
using TensorDesc = void*;  // cudnnTensorDescriptor_t
using FilterDesc = void*;  // cudnnFilterDescriptor_t
using ConvDesc = void*;    // cudnnConvolutionDescriptor_t

constexpr int kSuccess = 0;                                                   // CUDNN_STATUS_SUCCESS
constexpr int kFloat = 0, kDouble = 1, kHalf = 2, kInt32 = 4, kBfloat16 = 9, kBoolean = 11;  // cudnnDataType_t
constexpr int kNchw = 0;                                                      // cudnnTensorFormat_t
constexpr int kCrossCorrelation = 1;                                          // cudnnConvolutionMode_t
constexpr int kDefaultMath = 0, kTensorOpMath = 1, kFmaMath = 3;              // cudnnMathType_t

// cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t (one layout, the algo enum aside)
struct AlgoPerf {
  int algo;
  Status status;
  float time;
  size_t memory;
  int determinism;
  int math_type;
  int reserved[3];
};

// The backend ("graph") API of cudnn_graph.h: descriptors built attribute by attribute.
using BackendDesc = void*;  // cudnnBackendDescriptor_t
// cudnnBackendDescriptorType_t
constexpr int kConvolutionDesc = 1, kEngineDesc = 2, kEngineCfgDesc = 3, kEngineHeurDesc = 4, kExecutionPlanDesc = 5,
              kConvForwardOpDesc = 10, kConvBwdFilterOpDesc = 11, kConvBwdDataOpDesc = 12, kOperationGraphDesc = 15,
              kVariantPackDesc = 16, kTensorDesc = 17;
// cudnnBackendAttributeType_t
constexpr int kTypeHandle = 0, kTypeDataType = 1, kTypeBoolean = 2, kTypeInt64 = 3, kTypeFloat = 4, kTypeDouble = 5,
              kTypeVoidPtr = 6, kTypeConvMode = 7, kTypeHeurMode = 8, kTypeNumericalNote = 11, kTypeBackendDesc = 15;
constexpr int kHeurModeInstant = 0, kHeurModeFallback = 2, kHeurModeA = 3;  // cudnnBackendHeurMode_t
constexpr int kNoteTensorCore = 0, kNoteDownConvertInputs = 1, kNoteNondeterministic = 4;  // cudnnBackendNumericalNote_t
// cudnnBackendAttributeName_t
constexpr int kAttrConvCompType = 100, kAttrConvMode = 101, kAttrConvDilations = 102, kAttrConvFilterStrides = 103,
              kAttrConvPostPaddings = 104, kAttrConvPrePaddings = 105, kAttrConvSpatialDims = 106;
constexpr int kAttrHeurMode = 200, kAttrHeurOperationGraph = 201, kAttrHeurResults = 202;
constexpr int kAttrEngineCfgEngine = 300;
constexpr int kAttrPlanHandle = 400, kAttrPlanEngineConfig = 401, kAttrPlanWorkspaceSize = 402;
constexpr int kAttrConvFwdAlpha = 700, kAttrConvFwdBeta = 701, kAttrConvFwdConvDesc = 702, kAttrConvFwdW = 703,
              kAttrConvFwdX = 704, kAttrConvFwdY = 705;
constexpr int kAttrConvBwdDataAlpha = 706, kAttrConvBwdDataBeta = 707, kAttrConvBwdDataConvDesc = 708,
              kAttrConvBwdDataW = 709, kAttrConvBwdDataDx = 710, kAttrConvBwdDataDy = 711;
constexpr int kAttrConvBwdFilterAlpha = 712, kAttrConvBwdFilterBeta = 713, kAttrConvBwdFilterConvDesc = 714,
              kAttrConvBwdFilterDw = 715, kAttrConvBwdFilterX = 716, kAttrConvBwdFilterDy = 717;
constexpr int kAttrGraphHandle = 800, kAttrGraphOps = 801;
constexpr int kAttrTensorByteAlignment = 900, kAttrTensorDataType = 901, kAttrTensorDimensions = 902,
              kAttrTensorStrides = 903, kAttrTensorUniqueId = 906, kAttrTensorIsVirtual = 907,
              kAttrTensorIsByValue = 908;
constexpr int kAttrVariantPackUniqueIds = 1000, kAttrVariantPackDataPointers = 1001, kAttrVariantPackWorkspace = 1003;
constexpr int kAttrEngineGlobalIndex = 1301, kAttrEngineNumericalNote = 1303;

// The fused graphs of attention (vm/cuda/cudnn_sdpa.cpp): pointwise, matmul and reduction operations.
constexpr int kPointwiseDesc = 0, kPointwiseOpDesc = 13, kMatmulDesc = 18, kMatmulOpDesc = 19, kReductionDesc = 21,
              kReductionOpDesc = 22, kReshapeOpDesc = 31;
constexpr int kTypePointwiseMode = 14, kTypeReductionOperator = 18;
constexpr int kAttrPointwiseMode = 0, kAttrPointwiseMathPrec = 1, kAttrPointwiseAxis = 9;
constexpr int kAttrPointwiseOpDesc = 750, kAttrPointwiseOpX = 751, kAttrPointwiseOpB = 752, kAttrPointwiseOpY = 753,
              kAttrPointwiseOpAlpha1 = 754, kAttrPointwiseOpAlpha2 = 755, kAttrPointwiseOpT = 758;
constexpr int kAttrMatmulCompType = 1500, kAttrMatmulOpA = 1520, kAttrMatmulOpB = 1521, kAttrMatmulOpC = 1522,
              kAttrMatmulOpDesc = 1523;
constexpr int kAttrReductionOperator = 1600, kAttrReductionCompType = 1601, kAttrReductionIsDeterministic = 1602,
              kAttrReductionOpX = 1610, kAttrReductionOpY = 1611, kAttrReductionOpDesc = 1612;
constexpr int kAttrReshapeOpX = 2200, kAttrReshapeOpY = 2201;
// cudnnPointwiseMode_t and cudnnReduceTensorOp_t
constexpr int kPwAdd = 0, kPwMul = 1, kPwDiv = 6, kPwSub = 9, kPwExp = 13, kPwLog = 15, kPwIdentity = 21,
              kPwCmpGe = 303, kPwCmpLt = 304, kPwGenIndex = 501, kPwBinarySelect = 601;
constexpr int kReduceAdd = 0, kReduceMax = 3;

struct Api {
  size_t (*GetVersion)();
  const char* (*GetErrorString)(Status);
  Status (*Create)(Handle*);
  Status (*SetStream)(Handle, CUstream);
  Status (*CreateTensorDescriptor)(TensorDesc*);
  Status (*SetTensor4dDescriptor)(TensorDesc, int, int, int, int, int, int);
  Status (*DestroyTensorDescriptor)(TensorDesc);
  Status (*CreateFilterDescriptor)(FilterDesc*);
  Status (*SetFilter4dDescriptor)(FilterDesc, int, int, int, int, int, int);
  Status (*DestroyFilterDescriptor)(FilterDesc);
  Status (*CreateConvolutionDescriptor)(ConvDesc*);
  Status (*SetConvolution2dDescriptor)(ConvDesc, int, int, int, int, int, int, int, int);
  Status (*SetConvolutionGroupCount)(ConvDesc, int);
  Status (*SetConvolutionMathType)(ConvDesc, int);
  Status (*DestroyConvolutionDescriptor)(ConvDesc);
  Status (*GetConvolutionForwardAlgorithm_v7)(Handle, TensorDesc, FilterDesc, ConvDesc, TensorDesc, int, int*, AlgoPerf*);
  Status (*GetConvolutionForwardWorkspaceSize)(Handle, TensorDesc, FilterDesc, ConvDesc, TensorDesc, int, size_t*);
  Status (*ConvolutionForward)(Handle, const void*, TensorDesc, const void*, FilterDesc, const void*, ConvDesc, int, void*,
                               size_t, const void*, TensorDesc, void*);
  Status (*GetConvolutionBackwardDataAlgorithm_v7)(Handle, FilterDesc, TensorDesc, ConvDesc, TensorDesc, int, int*,
                                                   AlgoPerf*);
  Status (*GetConvolutionBackwardDataWorkspaceSize)(Handle, FilterDesc, TensorDesc, ConvDesc, TensorDesc, int, size_t*);
  Status (*ConvolutionBackwardData)(Handle, const void*, FilterDesc, const void*, TensorDesc, const void*, ConvDesc, int,
                                    void*, size_t, const void*, TensorDesc, void*);
  Status (*GetConvolutionBackwardFilterAlgorithm_v7)(Handle, TensorDesc, TensorDesc, ConvDesc, FilterDesc, int, int*,
                                                     AlgoPerf*);
  Status (*GetConvolutionBackwardFilterWorkspaceSize)(Handle, TensorDesc, TensorDesc, ConvDesc, FilterDesc, int, size_t*);
  Status (*ConvolutionBackwardFilter)(Handle, const void*, TensorDesc, const void*, TensorDesc, const void*, ConvDesc, int,
                                      void*, size_t, const void*, FilterDesc, void*);
  Status (*AddTensor)(Handle, const void*, TensorDesc, const void*, const void*, TensorDesc, void*);
  Status (*FindConvolutionForwardAlgorithmEx)(Handle, TensorDesc, const void*, FilterDesc, const void*, ConvDesc,
                                              TensorDesc, void*, int, int*, AlgoPerf*, void*, size_t);
  Status (*FindConvolutionBackwardDataAlgorithmEx)(Handle, FilterDesc, const void*, TensorDesc, const void*, ConvDesc,
                                                   TensorDesc, void*, int, int*, AlgoPerf*, void*, size_t);
  Status (*FindConvolutionBackwardFilterAlgorithmEx)(Handle, TensorDesc, const void*, TensorDesc, const void*, ConvDesc,
                                                     FilterDesc, void*, int, int*, AlgoPerf*, void*, size_t);
  Status (*BackendCreateDescriptor)(int, BackendDesc*);
  Status (*BackendDestroyDescriptor)(BackendDesc);
  Status (*BackendFinalize)(BackendDesc);
  Status (*BackendSetAttribute)(BackendDesc, int, int, int64_t, const void*);
  Status (*BackendGetAttribute)(BackendDesc, int, int, int64_t, int64_t*, void*);
  Status (*BackendExecute)(Handle, BackendDesc, BackendDesc);
};

// X(field): every function of Api, resolved as "cudnn" #field.
#define CR_CUDNN_FUNCTIONS(X)                                                                                        \
  X(GetVersion) X(GetErrorString) X(Create) X(SetStream) X(CreateTensorDescriptor) X(SetTensor4dDescriptor)        \
  X(DestroyTensorDescriptor) X(CreateFilterDescriptor) X(SetFilter4dDescriptor) X(DestroyFilterDescriptor)          \
  X(CreateConvolutionDescriptor) X(SetConvolution2dDescriptor) X(SetConvolutionGroupCount)                          \
  X(SetConvolutionMathType) X(DestroyConvolutionDescriptor) X(GetConvolutionForwardAlgorithm_v7)                    \
  X(GetConvolutionForwardWorkspaceSize) X(ConvolutionForward) X(GetConvolutionBackwardDataAlgorithm_v7)             \
  X(GetConvolutionBackwardDataWorkspaceSize) X(ConvolutionBackwardData) X(GetConvolutionBackwardFilterAlgorithm_v7) \
  X(GetConvolutionBackwardFilterWorkspaceSize) X(ConvolutionBackwardFilter) X(AddTensor)                           \
  X(FindConvolutionForwardAlgorithmEx) X(FindConvolutionBackwardDataAlgorithmEx)                                    \
  X(FindConvolutionBackwardFilterAlgorithmEx) X(BackendCreateDescriptor) X(BackendDestroyDescriptor)              \
  X(BackendFinalize) X(BackendSetAttribute) X(BackendGetAttribute) X(BackendExecute)

}  // namespace cr::cuda::cudnn_api
