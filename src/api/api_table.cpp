// api_table.cpp — pstate_get_api: the one symbol a dlopen consumer needs.
//
// The table is a constant built at compile time (no global mutable state): one member per
// exported entry point, in the order of pstate.h's declarations as of ABI 1.0 (the one
// reordering, at the major bump), growing only at its end within a major. A consumer asks for
// the ABI major it was compiled against and gets NULL when this library speaks another one.
#include "api/boundary.hpp"

namespace {

constexpr pstate_api_t make_table() {
  pstate_api_t t{};
  t.struct_size = sizeof(pstate_api_t);
  t.abi_major = PSTATE_ABI_MAJOR;
  t.library_version = PSTATE_VERSION;
  // errors, versions, names
  t.status_string = pstate_status_string;
  t.last_error = pstate_last_error;
  t.version = pstate_version;
  t.dtype_name = pstate_dtype_name;
  t.reduce_op_name = pstate_reduce_op_name;
  t.group_kind_name = pstate_group_kind_name;
  t.dtype_size = pstate_dtype_size;
  // layout
  t.layout_create = pstate_layout_create;
  t.layout_group_count = pstate_layout_group_count;
  t.layout_group_ranks = pstate_layout_group_ranks;
  t.layout_group_of = pstate_layout_group_of;
  t.layout_destroy = pstate_layout_destroy;
  // lifecycle
  t.init = pstate_init;
  t.initialize_model_parallel = pstate_initialize_model_parallel;
  t.model_parallel_is_initialized = pstate_model_parallel_is_initialized;
  t.destroy_model_parallel = pstate_destroy_model_parallel;
  t.finalize = pstate_finalize;
  t.abort = pstate_abort;
  t.revoke = pstate_revoke;
  t.set_interrupt_check = pstate_set_interrupt_check;
  t.trace_dump = pstate_trace_dump;
  // groups and survivors
  t.get_group = pstate_get_group;
  t.group_info = pstate_group_info;
  t.group_ranks = pstate_group_ranks;
  t.live_ranks = pstate_live_ranks;
  t.shrink = pstate_shrink;
  t.grow = pstate_grow;
  t.new_group = pstate_new_group;
  t.group_same_node = pstate_group_same_node;
  // collectives and point-to-point
  t.all_reduce = pstate_all_reduce;
  t.all_gather = pstate_all_gather;
  t.reduce_scatter = pstate_reduce_scatter;
  t.broadcast = pstate_broadcast;
  t.gather = pstate_gather;
  t.all_to_all = pstate_all_to_all;
  t.reduce = pstate_reduce;
  t.scatter = pstate_scatter;
  t.all_gatherv = pstate_all_gatherv;
  t.reduce_scatterv = pstate_reduce_scatterv;
  t.send = pstate_send;
  t.recv = pstate_recv;
  t.barrier = pstate_barrier;
  t.tp_allreduce = pstate_tp_allreduce;
  t.tp_allgather = pstate_tp_allgather;
  // objects
  t.broadcast_object = pstate_broadcast_object;
  t.all_gather_object = pstate_all_gather_object;
  t.send_object = pstate_send_object;
  t.recv_object = pstate_recv_object;
  t.bytes_free = pstate_bytes_free;
  // tensor dicts
  t.broadcast_tensor_dict = pstate_broadcast_tensor_dict;
  t.send_tensor_dict = pstate_send_tensor_dict;
  t.recv_tensor_dict = pstate_recv_tensor_dict;
  t.send_tensor_dict_sliced = pstate_send_tensor_dict_sliced;
  t.recv_tensor_dict_sliced = pstate_recv_tensor_dict_sliced;
  // non-blocking and batched point-to-point
  t.isend = pstate_isend;
  t.irecv = pstate_irecv;
  t.wait = pstate_wait;
  t.test = pstate_test;
  t.p2p_batch = pstate_p2p_batch;
  // graph capture
  t.graph_capture_begin = pstate_graph_capture_begin;
  t.graph_capture_end = pstate_graph_capture_end;
  t.mem_alloc = pstate_mem_alloc;
  t.mem_free = pstate_mem_free;
  t.mem_pool_reserve = pstate_mem_pool_reserve;
  t.mem_register = pstate_mem_register;
  t.mem_deregister = pstate_mem_deregister;
  t.mem_query = pstate_mem_query;
  t.group_mem_stats = pstate_group_mem_stats;
  t.set_graph_registration = pstate_set_graph_registration;
  t.all_to_all_v = pstate_all_to_all_v;
  // metrics
  t.metrics_text = pstate_metrics_text;
  // hooks
  t.add_hook = pstate_add_hook;
  t.remove_hook = pstate_remove_hook;
  // a group's own timeout
  t.group_set_timeout = pstate_group_set_timeout;
  t.group_timeout = pstate_group_timeout;
  return t;
}

constexpr pstate_api_t kApi = make_table();

}  // namespace

extern "C" PSTATE_API const pstate_api_t *pstate_get_api(uint32_t abi_major) {
  const pstate_api_t *table = nullptr;
  PSTATE_GUARD({
    if (abi_major != PSTATE_ABI_MAJOR)
      pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT, "this library provides ABI major ", PSTATE_ABI_MAJOR,
                          ", not ", abi_major, ": rebuild against its pstate.h or load libpstate.so.", abi_major);
    table = &kApi;
  });
  return table;  // NULL with pstate_last_error() set for another major
}
