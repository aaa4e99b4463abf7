/*
 * ops.c: the dispatch tables behind verbs.h's inline functions.
 *
 * ibv_poll_cq, ibv_post_send, ibv_post_recv, ibv_req_notify_cq and
 * ibv_post_srq_recv jump through ibv_context.ops without a NULL check;
 * ibv_query_port, ibv_query_device_ex, ibv_create_cq_ex and
 * ibv_create_qp_ex through the verbs_context in front of the ibv_context;
 * the ibv_wr_* calls through ibv_qp_ex; ibv_start_poll and ibv_wc_read_*
 * through ibv_cq_ex. This file fills all of them and does the work that
 * needs the unions of ibv_send_wr and ibv_wc, which the Go side cannot
 * address: work requests become tb_swr/tb_rwr, completions come back as
 * tb_wc.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "tbrdma.h"
#include "_cgo_export.h"

#define BATCH 32

static int op_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
	TB_GUARD_NEG();
	struct tb_wc buf[TB_CQ_BATCH];
	int total = 0;
	if (num_entries <= 0)
		return 0;
	while (total < num_entries) {
		int want = num_entries - total;
		if (want > TB_CQ_BATCH)
			want = TB_CQ_BATCH;
		int got = tbgo_poll_cq(((struct tb_cq *)cq)->h, want, buf);
		if (got < 0)
			return total ? total : got;
		for (int i = 0; i < got; i++) {
			struct ibv_wc *w = &wc[total + i];
			struct tb_wc *b = &buf[i];
			w->wr_id = b->wr_id;
			w->status = b->status;
			w->opcode = b->opcode;
			w->vendor_err = b->vendor_err;
			w->byte_len = b->byte_len;
			if (b->wc_flags & IBV_WC_WITH_INV)
				w->invalidated_rkey = b->inv_rkey;
			else
				w->imm_data = htonl(b->imm);
			w->qp_num = b->qp_num;
			w->src_qp = b->src_qp;
			w->wc_flags = b->wc_flags;
			w->pkey_index = b->pkey_index;
			w->slid = 0;
			w->sl = b->sl;
			w->dlid_path_bits = 0;
		}
		total += got;
		if (got < want)
			break;
	}
	return total;
}

static int op_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	TB_GUARD_ERR();
	return tbgo_req_notify_cq(((struct tb_cq *)cq)->h, solicited_only);
}

/* Flattens one ibv_send_wr. Inline data from several SGEs is gathered
 * into scratch (TB_MAX_INLINE bytes); a single SGE is passed as is. */
static int flatten_send(const struct ibv_send_wr *wr, struct tb_swr *s, uint8_t *scratch)
{
	memset(s, 0, sizeof *s);
	s->wr_id = wr->wr_id;
	s->opcode = wr->opcode;
	s->flags = wr->send_flags;
	if (wr->num_sge < 0)
		return EINVAL;
	s->num_sge = (uint32_t)wr->num_sge;
	s->sge = wr->sg_list;
	if (wr->num_sge > 0 && !wr->sg_list)
		return EINVAL;
	switch (wr->opcode) {
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		s->imm = ntohl(wr->imm_data);
		break;
	case IBV_WR_SEND_WITH_INV:
		s->invalidate_rkey = wr->invalidate_rkey;
		break;
	default:
		break;
	}
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
		s->remote_addr = wr->wr.rdma.remote_addr;
		s->rkey = wr->wr.rdma.rkey;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		s->remote_addr = wr->wr.atomic.remote_addr;
		s->rkey = wr->wr.atomic.rkey;
		s->compare_add = wr->wr.atomic.compare_add;
		s->swap = wr->wr.atomic.swap;
		break;
	default:
		break;
	}
	if ((wr->send_flags & IBV_SEND_INLINE) && wr->opcode != IBV_WR_RDMA_READ &&
	    wr->opcode != IBV_WR_ATOMIC_CMP_AND_SWP && wr->opcode != IBV_WR_ATOMIC_FETCH_AND_ADD) {
		size_t len = 0;
		for (int i = 0; i < wr->num_sge; i++)
			len += wr->sg_list[i].length;
		if (len > TB_MAX_INLINE)
			return EINVAL;
		if (wr->num_sge == 1) {
			s->inline_data = (const void *)(uintptr_t)wr->sg_list[0].addr;
		} else {
			size_t off = 0;
			for (int i = 0; i < wr->num_sge; i++) {
				memcpy(scratch + off, (const void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
				off += wr->sg_list[i].length;
			}
			s->inline_data = scratch;
		}
		s->inline_len = (uint32_t)len;
		s->sge = NULL;
		s->num_sge = 0;
	}
	return 0;
}

/* Posts batch[0..n) and on failure points *bad_wr at the first WR not
 * queued. */
static int flush_send(struct tb_qp *q, struct tb_swr *batch, struct ibv_send_wr **orig, int n,
		      struct ibv_send_wr **bad_wr)
{
	if (n == 0)
		return 0;
	int done = 0;
	int r = tbgo_post_send(q->h, batch, n, &done);
	if (r && bad_wr)
		*bad_wr = orig[done < n ? done : n - 1];
	return r;
}

static int op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	TB_GUARD_ERR();
	/* As rxe's provider: no bad_wr, or no work request, is EINVAL before
	 * anything is queued. */
	if (!bad_wr)
		return EINVAL;
	*bad_wr = NULL;
	if (!wr)
		return EINVAL;
	struct tb_qp *q = (struct tb_qp *)qp;
	struct tb_swr batch[BATCH];
	struct ibv_send_wr *orig[BATCH];
	uint8_t scratch[BATCH][TB_MAX_INLINE]; /* on the stack: static TLS this size stops dlopen (pyverbs) */
	int n = 0;
	for (; wr; wr = wr->next) {
		int r = flatten_send(wr, &batch[n], scratch[n]);
		if (r == 0 && qp->qp_type == IBV_QPT_UD) {
			if (!wr->wr.ud.ah) {
				r = EINVAL;
			} else {
				batch[n].ah = ((struct tb_ah *)wr->wr.ud.ah)->h;
				batch[n].remote_qpn = wr->wr.ud.remote_qpn;
				batch[n].remote_qkey = wr->wr.ud.remote_qkey;
			}
		}
		if (r) {
			int r2 = flush_send(q, batch, orig, n, bad_wr);
			if (r2)
				return r2;
			if (bad_wr)
				*bad_wr = wr;
			return r;
		}
		orig[n++] = wr;
		if (n == BATCH) {
			int r2 = flush_send(q, batch, orig, n, bad_wr);
			if (r2)
				return r2;
			n = 0;
		}
	}
	return flush_send(q, batch, orig, n, bad_wr);
}

typedef int (*post_recv_fn)(uintptr_t, struct tb_rwr *, int, int *);

static int post_recv_common(uintptr_t h, post_recv_fn fn, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	TB_GUARD_ERR();
	struct tb_rwr batch[BATCH];
	struct ibv_recv_wr *orig[BATCH];
	while (wr) {
		int n = 0;
		for (; wr && n < BATCH; wr = wr->next, n++) {
			if (wr->num_sge < 0 || (wr->num_sge > 0 && !wr->sg_list)) {
				int done = 0;
				if (n) {
					int r = fn(h, batch, n, &done);
					if (r) {
						if (bad_wr)
							*bad_wr = orig[done];
						return r;
					}
				}
				if (bad_wr)
					*bad_wr = wr;
				return EINVAL;
			}
			orig[n] = wr;
			batch[n].wr_id = wr->wr_id;
			batch[n].sge = wr->sg_list;
			batch[n].num_sge = (uint32_t)wr->num_sge;
			batch[n].pad = 0;
		}
		int done = 0;
		int r = fn(h, batch, n, &done);
		if (r) {
			if (bad_wr)
				*bad_wr = orig[done < n ? done : n - 1];
			return r;
		}
	}
	return 0;
}

static int op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	TB_GUARD_ERR();
	if (!bad_wr)
		return EINVAL;
	*bad_wr = NULL;
	if (!wr)
		return EINVAL;
	return post_recv_common(((struct tb_qp *)qp)->h, (post_recv_fn)tbgo_post_recv, wr, bad_wr);
}

static int op_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	return post_recv_common(((struct tb_srq *)srq)->h, (post_recv_fn)tbgo_post_srq_recv, wr, bad_wr);
}

static struct ibv_mw *op_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	(void)pd; (void)type;
	errno = EOPNOTSUPP;
	return NULL;
}

static int op_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind)
{
	(void)qp; (void)mw; (void)mw_bind;
	return EOPNOTSUPP;
}

static int op_dealloc_mw(struct ibv_mw *mw)
{
	(void)mw;
	return EOPNOTSUPP;
}

static int vop_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *port_attr,
			  size_t port_attr_len)
{
	TB_GUARD_ERR();
	struct ibv_port_attr a;
	if (!port_attr)
		return EINVAL;
	int r = tbgo_query_port(TB_CTX(context)->h, port_num, &a);
	if (r)
		return r;
	size_t n = port_attr_len < sizeof a ? port_attr_len : sizeof a;
	memset(port_attr, 0, port_attr_len);
	memcpy(port_attr, &a, n);
	return 0;
}

static int vop_query_device_ex(struct ibv_context *context, const struct ibv_query_device_ex_input *input,
			       struct ibv_device_attr_ex *attr, size_t attr_size)
{
	TB_GUARD_ERR();
	if (input && input->comp_mask)
		return EINVAL;
	return tbgo_query_device_ex(TB_CTX(context)->h, attr, attr_size);
}

struct ibv_cq_ex *tb_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr);
struct ibv_qp *tb_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *a);

void tb_fill_context_ops(struct tb_context *c)
{
	struct ibv_context_ops *o = &c->vc.context.ops;
	o->poll_cq = op_poll_cq;
	o->req_notify_cq = op_req_notify_cq;
	o->post_send = op_post_send;
	o->post_recv = op_post_recv;
	o->post_srq_recv = op_post_srq_recv;
	o->alloc_mw = op_alloc_mw;
	o->bind_mw = op_bind_mw;
	o->dealloc_mw = op_dealloc_mw;
	c->vc.query_port = vop_query_port;
	c->vc.query_device_ex = vop_query_device_ex;
	c->vc.create_cq_ex = tb_create_cq_ex;
	c->vc.create_qp_ex = tb_create_qp_ex;
	c->vc.context.abi_compat = (void *)UINTPTR_MAX; /* __VERBS_ABI_IS_EXTENDED: verbs_get_ctx accepts it */
}

/*
 * The new post-send API. ibv_wr_start opens a batch; each ibv_wr_<op> adds
 * a work request (wr_id and wr_flags from the ibv_qp_ex fields the
 * application just wrote); the ibv_wr_set_* calls fill in the last one;
 * ibv_wr_complete posts them all in one call and reports the first
 * failure, as providers do; ibv_wr_abort drops them.
 */
#define QPX(q) ((struct tb_qp *)(q))

static struct tb_swr *wr_add(struct ibv_qp_ex *ibqp, uint32_t opcode)
{
	struct tb_qp *q = QPX(ibqp);
	if (q->batch_err)
		return NULL;
	if (q->nbatch >= q->cap_wr) {
		q->batch_err = ENOMEM;
		return NULL;
	}
	struct tb_swr *s = &q->batch[q->nbatch++];
	memset(s, 0, sizeof *s);
	s->wr_id = ibqp->wr_id;
	s->flags = ibqp->wr_flags;
	s->opcode = opcode;
	return s;
}

static struct tb_swr *wr_last(struct ibv_qp_ex *ibqp)
{
	struct tb_qp *q = QPX(ibqp);
	if (q->batch_err)
		return NULL;
	if (q->nbatch == 0) {
		q->batch_err = EINVAL;
		return NULL;
	}
	return &q->batch[q->nbatch - 1];
}

static void wr_start(struct ibv_qp_ex *ibqp)
{
	struct tb_qp *q = QPX(ibqp);
	q->nbatch = q->nsge = q->ninline = 0;
	q->batch_err = 0;
}

static int wr_complete(struct ibv_qp_ex *ibqp)
{
	TB_GUARD_ERR();
	struct tb_qp *q = QPX(ibqp);
	int err = q->batch_err;
	uint32_t n = q->nbatch;
	q->nbatch = q->nsge = q->ninline = 0;
	q->batch_err = 0;
	if (err)
		return err;
	if (n == 0)
		return 0;
	int done = 0;
	return tbgo_post_send(q->h, q->batch, (int)n, &done);
}

static void wr_abort(struct ibv_qp_ex *ibqp)
{
	struct tb_qp *q = QPX(ibqp);
	q->nbatch = q->nsge = q->ninline = 0;
	q->batch_err = 0;
}

static void wr_rdma_write(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr)
{
	struct tb_swr *s = wr_add(qp, IBV_WR_RDMA_WRITE);
	if (s) {
		s->rkey = rkey;
		s->remote_addr = remote_addr;
	}
}

static void wr_rdma_write_imm(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, __be32 imm)
{
	struct tb_swr *s = wr_add(qp, IBV_WR_RDMA_WRITE_WITH_IMM);
	if (s) {
		s->rkey = rkey;
		s->remote_addr = remote_addr;
		s->imm = ntohl(imm);
	}
}

static void wr_rdma_read(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr)
{
	struct tb_swr *s = wr_add(qp, IBV_WR_RDMA_READ);
	if (s) {
		s->rkey = rkey;
		s->remote_addr = remote_addr;
	}
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, uint64_t compare,
			      uint64_t swap)
{
	struct tb_swr *s = wr_add(qp, IBV_WR_ATOMIC_CMP_AND_SWP);
	if (s) {
		s->rkey = rkey;
		s->remote_addr = remote_addr;
		s->compare_add = compare;
		s->swap = swap;
	}
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, uint64_t add)
{
	struct tb_swr *s = wr_add(qp, IBV_WR_ATOMIC_FETCH_AND_ADD);
	if (s) {
		s->rkey = rkey;
		s->remote_addr = remote_addr;
		s->compare_add = add;
	}
}

static void wr_send(struct ibv_qp_ex *qp) { wr_add(qp, IBV_WR_SEND); }

static void wr_send_imm(struct ibv_qp_ex *qp, __be32 imm)
{
	struct tb_swr *s = wr_add(qp, IBV_WR_SEND_WITH_IMM);
	if (s)
		s->imm = ntohl(imm);
}

static void wr_send_inv(struct ibv_qp_ex *qp, uint32_t invalidate_rkey)
{
	struct tb_swr *s = wr_add(qp, IBV_WR_SEND_WITH_INV);
	if (s)
		s->invalidate_rkey = invalidate_rkey;
}

static void wr_unsupported(struct ibv_qp_ex *qp)
{
	struct tb_qp *q = QPX(qp);
	if (!q->batch_err)
		q->batch_err = EOPNOTSUPP;
}

static void wr_bind_mw(struct ibv_qp_ex *qp, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *bi)
{
	(void)mw; (void)rkey; (void)bi;
	wr_unsupported(qp);
}

static void wr_local_inv(struct ibv_qp_ex *qp, uint32_t rkey)
{
	(void)rkey;
	wr_unsupported(qp);
}

static void wr_send_tso(struct ibv_qp_ex *qp, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	(void)hdr; (void)hdr_sz; (void)mss;
	wr_unsupported(qp);
}

static void wr_set_xrc_srqn(struct ibv_qp_ex *qp, uint32_t srqn)
{
	(void)srqn;
	wr_unsupported(qp);
}

static void wr_atomic_write(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, const void *atomic_wr)
{
	(void)rkey; (void)remote_addr; (void)atomic_wr;
	wr_unsupported(qp);
}

static void wr_set_ud_addr(struct ibv_qp_ex *qp, struct ibv_ah *ah, uint32_t remote_qpn, uint32_t remote_qkey)
{
	struct tb_swr *s = wr_last(qp);
	if (!s)
		return;
	if (!ah) {
		QPX(qp)->batch_err = EINVAL;
		return;
	}
	s->ah = ((struct tb_ah *)ah)->h;
	s->remote_qpn = remote_qpn;
	s->remote_qkey = remote_qkey;
}

static void wr_set_sge_list(struct ibv_qp_ex *qp, size_t num_sge, const struct ibv_sge *sg_list)
{
	struct tb_qp *q = QPX(qp);
	struct tb_swr *s = wr_last(qp);
	if (!s)
		return;
	if (num_sge > q->cap_sge || q->nsge + num_sge > (size_t)q->cap_wr * q->cap_sge || (num_sge && !sg_list)) {
		q->batch_err = EINVAL;
		return;
	}
	struct ibv_sge *dst = &q->batch_sge[q->nsge];
	memcpy(dst, sg_list, num_sge * sizeof *dst);
	q->nsge += (uint32_t)num_sge;
	s->sge = dst;
	s->num_sge = (uint32_t)num_sge;
	s->inline_data = NULL;
	s->inline_len = 0;
}

static void wr_set_sge(struct ibv_qp_ex *qp, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge sge = {.addr = addr, .length = length, .lkey = lkey};
	wr_set_sge_list(qp, 1, &sge);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *qp, size_t num_buf, const struct ibv_data_buf *buf_list)
{
	struct tb_qp *q = QPX(qp);
	struct tb_swr *s = wr_last(qp);
	if (!s)
		return;
	size_t len = 0;
	for (size_t i = 0; i < num_buf; i++)
		len += buf_list[i].length;
	if (len > q->cap_inline || q->ninline + len > (size_t)q->cap_wr * q->cap_inline) {
		q->batch_err = EINVAL;
		return;
	}
	uint8_t *dst = q->batch_inline + q->ninline;
	size_t off = 0;
	for (size_t i = 0; i < num_buf; i++) {
		memcpy(dst + off, buf_list[i].addr, buf_list[i].length);
		off += buf_list[i].length;
	}
	q->ninline += (uint32_t)len;
	s->inline_data = dst;
	s->inline_len = (uint32_t)len;
	s->flags |= IBV_SEND_INLINE;
	s->sge = NULL;
	s->num_sge = 0;
}

static void wr_set_inline_data(struct ibv_qp_ex *qp, void *addr, size_t length)
{
	struct ibv_data_buf b = {.addr = addr, .length = length};
	wr_set_inline_data_list(qp, 1, &b);
}

void tb_init_qp_ex(struct tb_qp *q)
{
	struct ibv_qp_ex *x = &q->qpx;
	size_t nwr = q->cap_wr ? q->cap_wr : 1;
	q->batch = calloc(nwr, sizeof *q->batch);
	q->batch_sge = calloc(nwr * (q->cap_sge ? q->cap_sge : 1), sizeof *q->batch_sge);
	q->batch_inline = calloc(nwr * (q->cap_inline ? q->cap_inline : 1), 1);
	if (!q->batch || !q->batch_sge || !q->batch_inline) {
		free(q->batch);
		free(q->batch_sge);
		free(q->batch_inline);
		q->batch = NULL;
		q->batch_sge = NULL;
		q->batch_inline = NULL;
		return;
	}
	x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	x->wr_atomic_fetch_add = wr_atomic_fetch_add;
	x->wr_bind_mw = wr_bind_mw;
	x->wr_local_inv = wr_local_inv;
	x->wr_rdma_read = wr_rdma_read;
	x->wr_rdma_write = wr_rdma_write;
	x->wr_rdma_write_imm = wr_rdma_write_imm;
	x->wr_send = wr_send;
	x->wr_send_imm = wr_send_imm;
	x->wr_send_inv = wr_send_inv;
	x->wr_send_tso = wr_send_tso;
	x->wr_set_ud_addr = wr_set_ud_addr;
	x->wr_set_xrc_srqn = wr_set_xrc_srqn;
	x->wr_set_inline_data = wr_set_inline_data;
	x->wr_set_inline_data_list = wr_set_inline_data_list;
	x->wr_set_sge = wr_set_sge;
	x->wr_set_sge_list = wr_set_sge_list;
	x->wr_start = wr_start;
	x->wr_complete = wr_complete;
	x->wr_abort = wr_abort;
	x->wr_atomic_write = wr_atomic_write;
}

/*
 * The extended CQ: ibv_start_poll fetches up to TB_CQ_BATCH completions,
 * ibv_next_poll steps through them (fetching more when they run out),
 * ibv_wc_read_* read the current one. status and wr_id are fields the
 * application reads directly.
 */
#define CQX(c) ((struct tb_cq *)(c))

static int cqx_fill(struct tb_cq *c)
{
	int got = tbgo_poll_cq(c->h, TB_CQ_BATCH, c->buf);
	if (got <= 0) {
		c->nbuf = c->cur = 0;
		return got < 0 ? EINVAL : ENOENT;
	}
	c->nbuf = got;
	c->cur = 0;
	return 0;
}

static void cqx_expose(struct tb_cq *c)
{
	c->cq.status = c->buf[c->cur].status;
	c->cq.wr_id = c->buf[c->cur].wr_id;
}

static int cqx_start_poll(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr)
{
	TB_GUARD_ERR();
	if (attr && attr->comp_mask)
		return EINVAL;
	struct tb_cq *c = CQX(cq);
	int r = cqx_fill(c);
	if (r)
		return r;
	cqx_expose(c);
	return 0;
}

static int cqx_next_poll(struct ibv_cq_ex *cq)
{
	struct tb_cq *c = CQX(cq);
	if (++c->cur >= c->nbuf) {
		int r = cqx_fill(c);
		if (r)
			return r;
	}
	cqx_expose(c);
	return 0;
}

static void cqx_end_poll(struct ibv_cq_ex *cq)
{
	struct tb_cq *c = CQX(cq);
	c->nbuf = c->cur = 0;
}

static struct tb_wc *cqx_cur(struct ibv_cq_ex *cq) { return &CQX(cq)->buf[CQX(cq)->cur]; }
static enum ibv_wc_opcode cqx_read_opcode(struct ibv_cq_ex *cq) { return cqx_cur(cq)->opcode; }
static uint32_t cqx_read_vendor_err(struct ibv_cq_ex *cq) { return cqx_cur(cq)->vendor_err; }
static uint32_t cqx_read_byte_len(struct ibv_cq_ex *cq) { return cqx_cur(cq)->byte_len; }
static __be32 cqx_read_imm_data(struct ibv_cq_ex *cq)
{
	struct tb_wc *w = cqx_cur(cq);
	return (w->wc_flags & IBV_WC_WITH_INV) ? w->inv_rkey : htonl(w->imm);
}
static uint32_t cqx_read_qp_num(struct ibv_cq_ex *cq) { return cqx_cur(cq)->qp_num; }
static uint32_t cqx_read_src_qp(struct ibv_cq_ex *cq) { return cqx_cur(cq)->src_qp; }
static unsigned int cqx_read_wc_flags(struct ibv_cq_ex *cq) { return cqx_cur(cq)->wc_flags; }
static uint32_t cqx_read_slid(struct ibv_cq_ex *cq) { (void)cq; return 0; }
static uint8_t cqx_read_sl(struct ibv_cq_ex *cq) { return cqx_cur(cq)->sl; }
static uint8_t cqx_read_dlid_path_bits(struct ibv_cq_ex *cq) { (void)cq; return 0; }

void tb_init_cq_ex(struct tb_cq *c)
{
	struct ibv_cq_ex *x = &c->cq;
	x->start_poll = cqx_start_poll;
	x->next_poll = cqx_next_poll;
	x->end_poll = cqx_end_poll;
	x->read_opcode = cqx_read_opcode;
	x->read_vendor_err = cqx_read_vendor_err;
	x->read_byte_len = cqx_read_byte_len;
	x->read_imm_data = cqx_read_imm_data;
	x->read_qp_num = cqx_read_qp_num;
	x->read_src_qp = cqx_read_src_qp;
	x->read_wc_flags = cqx_read_wc_flags;
	x->read_slid = cqx_read_slid;
	x->read_sl = cqx_read_sl;
	x->read_dlid_path_bits = cqx_read_dlid_path_bits;
}
