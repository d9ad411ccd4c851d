// What vm/cuda/cudnn.cpp shares with vm/cuda/cudnn_graph.cpp (not for other files): the loaded
// functions, the error check and the per-stream handles.
#pragma once
#include "vm/cuda/cudnn.hpp"
#include "vm/cuda/cudnn_api.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/dtype.hpp"

namespace cr::cuda::cudnn_detail {

const cudnn_api::Api& api();                              // (once the library loaded: after handle())
void check(cudnn_api::Status s, const char* what);        // raises cuDNN's message when s fails
cudnn_api::Handle handle(int index);                      // the current stream's; raises why cuDNN is not usable
int data_type(DType d);                                   // cudnnDataType_t; raises for non-floating dtypes
const char* pass_name(ConvPass p);                        // "forward", "backward data", "backward filter"

}  // namespace cr::cuda::cudnn_detail

namespace cr::cuda {
}
