/*
 * tbrdma.h: the objects the C library hands out and the plain structs its C
 * entry points and its Go side exchange.
 *
 * Every object an rdma-core program holds (struct ibv_context, ibv_pd, …) is
 * the first member of a tb_* wrapper allocated by the C side; the wrapper's
 * h is a runtime/cgo.Handle naming the Go object behind it. The structs
 * tb_swr, tb_rwr and tb_wc carry work requests and completions across the
 * C/Go boundary without the unions of ibv_send_wr and ibv_wc, which cgo
 * cannot address: the C side decodes and encodes those.
 *
 * Compiled against the distribution's rdma-core headers (libibverbs-dev,
 * librdmacm-dev); no rdma-core code is copied.
 */
#ifndef TBRDMA_H
#define TBRDMA_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define TB_MAX_SGE 32
#define TB_MAX_INLINE 256

/* A device: rdma-core's verbs_device begins with ibv_device and goes on with
 * the provider's ops pointer, which the stock provider libraries (libmlx5,
 * libefa, linked by perftest and UCX) read to tell whether a device is
 * theirs. It stays NULL, so they leave tbrdma's devices alone. */
struct tb_device {
	struct ibv_device dev;
	void *provider_ops_zero[4];
	int index;
	uint64_t guid_be;
};

struct tb_context {
	struct verbs_context vc; /* vc.context is what programs hold; it is last in verbs_context */
	uintptr_t h;
};

struct tb_pd {
	struct ibv_pd pd;
	uintptr_t h;
};

struct tb_mr {
	struct ibv_mr mr;
	uintptr_t h;
};

struct tb_channel {
	struct ibv_comp_channel ch;
	uintptr_t h;
};

struct tb_ah {
	struct ibv_ah ah;
	uintptr_t h;
};

struct tb_srq {
	struct ibv_srq srq;
	uintptr_t h;
};

/* A send work request, flattened. imm is in host order (the numeric value
 * the peer sees); sge points at num_sge entries valid during the call;
 * inline_data, when set, holds inline_len bytes of an inline send. */
struct tb_swr {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	const struct ibv_sge *sge;
	const void *inline_data;
	uintptr_t ah; /* the AH's handle (UD) */
	uint32_t opcode;
	uint32_t flags;
	uint32_t num_sge;
	uint32_t inline_len;
	uint32_t rkey;
	uint32_t imm;
	uint32_t invalidate_rkey;
	uint32_t remote_qpn;
	uint32_t remote_qkey;
	uint32_t pad;
};

struct tb_rwr {
	uint64_t wr_id;
	const struct ibv_sge *sge;
	uint32_t num_sge;
	uint32_t pad;
};

/* A completion, flattened: imm in host order. */
struct tb_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm;
	uint32_t inv_rkey;
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t wc_flags;
	uint16_t pkey_index;
	/* sl of a UD receive: the RoCE v2 packet's L3 header type as mlx5
	 * reports it there (2 IPv4, 1 IPv6), which UCX reads; else 0. */
	uint8_t sl;
	uint8_t pad;
};

/* A CQ: ibv_cq_ex begins with the fields of ibv_cq, so one object serves
 * both APIs. The ex polling API reads completions from a small buffer. */
#define TB_CQ_BATCH 16
struct tb_cq {
	struct ibv_cq_ex cq;
	uintptr_t h;
	uint64_t wc_flags; /* what create_cq_ex asked to read */
	int nbuf, cur;
	struct tb_wc buf[TB_CQ_BATCH];
};

/* A QP: ibv_qp_ex begins with ibv_qp. The batch holds the work requests
 * built with the ibv_wr_* calls between ibv_wr_start and ibv_wr_complete. */
struct tb_qp {
	struct ibv_qp_ex qpx;
	uintptr_t h;
	int ex; /* created by ibv_create_qp_ex with send ops: ibv_qp_to_qp_ex answers */
	uint32_t cap_wr, cap_sge, cap_inline;
	struct tb_swr *batch;
	struct ibv_sge *batch_sge;
	uint8_t *batch_inline;
	uint32_t nbatch, nsge, ninline;
	int batch_err;
};

#define TB_CTX(c) ((struct tb_context *)((char *)(c) - offsetof(struct tb_context, vc.context)))

/* fork(): the Go runtime does not survive in a child (allocation and
 * garbage collection hang there), so every entry point that would enter Go
 * refuses in a forked child, once with a message on stderr, with
 * EOPNOTSUPP. */
extern volatile int tb_forked;
int tb_child_refuse(void);
#define TB_GUARD_PTR() do { if (tb_forked && tb_child_refuse()) { errno = EOPNOTSUPP; return NULL; } } while (0)
#define TB_GUARD_ERR() do { if (tb_forked && tb_child_refuse()) return EOPNOTSUPP; } while (0)
#define TB_GUARD_NEG() do { if (tb_forked && tb_child_refuse()) { errno = EOPNOTSUPP; return -1; } } while (0)
#define TB_GUARD_NEGERR() do { if (tb_forked && tb_child_refuse()) return -EOPNOTSUPP; } while (0)
#define TB_GUARD_VOID() do { if (tb_forked && tb_child_refuse()) return; } while (0)

/* C helpers the Go side calls. */
void tb_fill_context_ops(struct tb_context *c);
void tb_init_qp_ex(struct tb_qp *qp);
void tb_init_cq_ex(struct tb_cq *cq);
int tb_eventfd_write(int fd, uint64_t n);
/* Reads one count of a semaphore eventfd: blocks unless the fd is
 * O_NONBLOCK (then EAGAIN), a cancellation point as read is. */
int tb_eventfd_take(int fd);

#endif
