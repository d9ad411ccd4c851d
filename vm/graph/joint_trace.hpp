// Tracing a compiled segment's backward (joint.hpp): the forward graph re-runs node by node
// with eager autograd, the engine runs backward over those nodes, and every op call of both
// goes into one joint graph. The backward graph is cut from it: the engine's calls, reading
// the gradients and the forward values the segment kept - or recomputing the others (the
// partitioner, partition.hpp, chose which).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "vm/graph/graph.hpp"

namespace cr::graph {

struct TraceInput {
  const Graph& forward;
  const std::vector<Tensor>& inputs;  // by value id: the forward graph's inputs
  const std::vector<int32_t>& ins;    // the inputs whose gradients are wanted (value ids)
  const std::vector<int32_t>& kept;   // forward values the backward graph may read besides inputs
};

struct Traced {
  std::vector<Tensor> grads;  // of `ins`, computed by the traced run (undefined: none)
  std::string broken;         // why no graph could be cut ("": one was)
  std::shared_ptr<Graph> graph;
  std::vector<int32_t> grad_in;                       // the backward graph's value per output gradient
  std::vector<std::pair<int32_t, int32_t>> reads;     // (its value, the forward value it reads)
  std::vector<int32_t> grad_out;                      // its value per entry of `ins`, or -1
  std::vector<std::string> recomputed;                // the forward ops it recomputes ("name (where)")
  std::vector<double> numbers;                        // its numbers that vary (Arg::varying)
};

// `roots`: forward value ids whose gradients `grads` are. With `record` false it only computes.
Traced trace_backward(Context& ctx, const TraceInput& in, const std::vector<int32_t>& roots,
                      const std::vector<Tensor>& grads, bool record);

}  // namespace cr::graph
