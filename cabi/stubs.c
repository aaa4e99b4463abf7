/*
 * stubs.c: entry points that exist so that programs load, not to be used.
 *
 * perftest and UCX link the stock provider libraries libmlx5.so.1 and
 * libefa.so.1, which need libibverbs' private driver interface
 * (IBVERBS_PRIVATE_34: the ibv_cmd_* kernel commands, driver registration)
 * at load time (BIND_NOW). They never reach it: tbrdma registers no
 * provider, and the providers see no device of theirs. Each command fails
 * with EOPNOTSUPP; registration is ignored. The ibv_copy_*_kern helpers
 * convert kernel ABI structs no tbrdma program sees.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdarg.h>

bool verbs_allow_disassociate_destroy;

void verbs_register_driver_34(const void *ops) { (void)ops; }

void __verbs_log(void *ctx, const char *fmt, ...) { (void)ctx; (void)fmt; }

unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void *link) { (void)link; return num_attrs; }

void ibv_copy_path_rec_from_kern(void *dst, const void *src) { (void)dst; (void)src; }
void ibv_copy_path_rec_to_kern(void *dst, const void *src) { (void)dst; (void)src; }
void ibv_copy_qp_attr_from_kern(void *dst, const void *src) { (void)dst; (void)src; }
void ibv_copy_ah_attr_from_kern(void *dst, const void *src) { (void)dst; (void)src; }

#define TB_UNSUPPORTED_PTR(name) \
	void *name(void); \
	void *name(void) { errno = EOPNOTSUPP; return NULL; }

#define TB_UNSUPPORTED(name) \
	int name(void); \
	int name(void) { return EOPNOTSUPP; }

TB_UNSUPPORTED_PTR(_verbs_init_and_alloc_context)
TB_UNSUPPORTED(execute_ioctl)
TB_UNSUPPORTED(ibv_cmd_advise_mr)
TB_UNSUPPORTED(ibv_cmd_alloc_dm)
TB_UNSUPPORTED(ibv_cmd_alloc_mw)
TB_UNSUPPORTED(ibv_cmd_alloc_pd)
TB_UNSUPPORTED(ibv_cmd_attach_mcast)
TB_UNSUPPORTED(ibv_cmd_close_xrcd)
TB_UNSUPPORTED(ibv_cmd_create_ah)
TB_UNSUPPORTED(ibv_cmd_create_counters)
TB_UNSUPPORTED(ibv_cmd_create_cq)
TB_UNSUPPORTED(ibv_cmd_create_cq_ex)
TB_UNSUPPORTED(ibv_cmd_create_flow)
TB_UNSUPPORTED(ibv_cmd_create_flow_action_esp)
TB_UNSUPPORTED(ibv_cmd_create_qp)
TB_UNSUPPORTED(ibv_cmd_create_qp_ex)
TB_UNSUPPORTED(ibv_cmd_create_qp_ex2)
TB_UNSUPPORTED(ibv_cmd_create_rwq_ind_table)
TB_UNSUPPORTED(ibv_cmd_create_srq)
TB_UNSUPPORTED(ibv_cmd_create_srq_ex)
TB_UNSUPPORTED(ibv_cmd_create_wq)
TB_UNSUPPORTED(ibv_cmd_dealloc_mw)
TB_UNSUPPORTED(ibv_cmd_dealloc_pd)
TB_UNSUPPORTED(ibv_cmd_dereg_mr)
TB_UNSUPPORTED(ibv_cmd_destroy_ah)
TB_UNSUPPORTED(ibv_cmd_destroy_counters)
TB_UNSUPPORTED(ibv_cmd_destroy_cq)
TB_UNSUPPORTED(ibv_cmd_destroy_flow)
TB_UNSUPPORTED(ibv_cmd_destroy_flow_action)
TB_UNSUPPORTED(ibv_cmd_destroy_qp)
TB_UNSUPPORTED(ibv_cmd_destroy_rwq_ind_table)
TB_UNSUPPORTED(ibv_cmd_destroy_srq)
TB_UNSUPPORTED(ibv_cmd_destroy_wq)
TB_UNSUPPORTED(ibv_cmd_detach_mcast)
TB_UNSUPPORTED(ibv_cmd_free_dm)
TB_UNSUPPORTED(ibv_cmd_get_context)
TB_UNSUPPORTED(ibv_cmd_modify_cq)
TB_UNSUPPORTED(ibv_cmd_modify_flow_action_esp)
TB_UNSUPPORTED(ibv_cmd_modify_qp)
TB_UNSUPPORTED(ibv_cmd_modify_qp_ex)
TB_UNSUPPORTED(ibv_cmd_modify_srq)
TB_UNSUPPORTED(ibv_cmd_modify_wq)
TB_UNSUPPORTED(ibv_cmd_open_qp)
TB_UNSUPPORTED(ibv_cmd_open_xrcd)
TB_UNSUPPORTED(ibv_cmd_poll_cq)
TB_UNSUPPORTED(ibv_cmd_post_recv)
TB_UNSUPPORTED(ibv_cmd_post_send)
TB_UNSUPPORTED(ibv_cmd_post_srq_recv)
TB_UNSUPPORTED(ibv_cmd_query_context)
TB_UNSUPPORTED(ibv_cmd_query_device_any)
TB_UNSUPPORTED(ibv_cmd_query_mr)
TB_UNSUPPORTED(ibv_cmd_query_port)
TB_UNSUPPORTED(ibv_cmd_query_qp)
TB_UNSUPPORTED(ibv_cmd_query_srq)
TB_UNSUPPORTED(ibv_cmd_read_counters)
TB_UNSUPPORTED(ibv_cmd_reg_dm_mr)
TB_UNSUPPORTED(ibv_cmd_reg_dmabuf_mr)
TB_UNSUPPORTED(ibv_cmd_reg_mr)
TB_UNSUPPORTED(ibv_cmd_req_notify_cq)
TB_UNSUPPORTED(ibv_cmd_rereg_mr)
TB_UNSUPPORTED(ibv_cmd_resize_cq)
TB_UNSUPPORTED(verbs_init_cq)
TB_UNSUPPORTED_PTR(verbs_open_device)
TB_UNSUPPORTED(verbs_set_ops)
TB_UNSUPPORTED(verbs_uninit_context)
