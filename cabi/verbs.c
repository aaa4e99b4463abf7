/*
 * verbs.c: libibverbs' exported entry points. Each checks what rdma-core
 * checks before it reaches the kernel, then calls the Go side (tbgo_*),
 * which returns 0 or an errno; this file turns that into rdma-core's
 * convention for the call (NULL and errno, a returned errno, or -1).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <arpa/inet.h>

#include "tbrdma.h"
#include "_cgo_export.h"

/* verbs.h turns these names into macros over inline helpers; the library
 * defines the functions themselves. */
#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define TB_H(p, type) (((struct type *)(p))->h)

static uintptr_t ctx_h(struct ibv_context *c) { return TB_CTX(c)->h; }

volatile int tb_forked;

static void tb_after_fork_child(void) { tb_forked = 1; }

__attribute__((constructor)) static void tb_init_fork_guard(void)
{
	pthread_atfork(NULL, NULL, tb_after_fork_child);
}

int tb_child_refuse(void)
{
	static int said;
	if (!said) {
		said = 1;
		static const char msg[] =
			"tbrdma: this process was forked after the RDMA library (tbrdma's libibverbs) started: "
			"the child cannot use RDMA verbs or rdma_cm (Go's runtime does not survive fork). "
			"Use them in the parent, or exec a new program in the child.\n";
		ssize_t r = write(2, msg, sizeof msg - 1);
		(void)r;
	}
	return 1;
}

int tb_eventfd_write(int fd, uint64_t n)
{
	ssize_t r;
	do {
		r = write(fd, &n, sizeof n);
	} while (r < 0 && errno == EINTR);
	return r == sizeof n ? 0 : -1;
}

int tb_eventfd_take(int fd)
{
	uint64_t v;
	ssize_t r;
	do {
		r = read(fd, &v, sizeof v);
	} while (r < 0 && errno == EINTR);
	return r == sizeof v ? 0 : -1;
}

struct ibv_device **ibv_get_device_list(int *num_devices)
{
	TB_GUARD_PTR();
	int err = 0;
	struct ibv_device **l = tbgo_get_device_list(num_devices, &err);
	if (!l) {
		errno = err;
		if (num_devices)
			*num_devices = 0;
	}
	return l;
}

void ibv_free_device_list(struct ibv_device **list) { free(list); }

const char *ibv_get_device_name(struct ibv_device *device)
{
	return device ? device->name : NULL;
}

__be64 ibv_get_device_guid(struct ibv_device *device)
{
	return device ? ((struct tb_device *)device)->guid_be : 0;
}

int ibv_get_device_index(struct ibv_device *device)
{
	return device ? ((struct tb_device *)device)->index : -1;
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	TB_GUARD_PTR();
	int err = 0;
	struct ibv_context *c = tbgo_open_device(device, &err);
	if (!c)
		errno = err;
	else
		pthread_mutex_init(&c->mutex, NULL);
	return c;
}

int ibv_close_device(struct ibv_context *context)
{
	TB_GUARD_ERR();
	if (!context)
		return EINVAL;
	pthread_mutex_destroy(&context->mutex);
	return tbgo_close_device(ctx_h(context));
}

struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	errno = EOPNOTSUPP;
	return NULL;
}

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *device_attr)
{
	TB_GUARD_ERR();
	if (!context)
		return EINVAL;
	return tbgo_query_device(ctx_h(context), device_attr);
}

int ibv_query_port(struct ibv_context *context, uint8_t port_num, struct _compat_ibv_port_attr *port_attr)
{
	TB_GUARD_ERR();
	if (!context)
		return EINVAL;
	return tbgo_query_port(ctx_h(context), port_num, (struct ibv_port_attr *)port_attr);
}

/* Reads entry index of port's GID table as rdma_rxe presents it. The Go
 * side's table holds the device's addresses at the odd indexes, as RoCE v2
 * GIDs; each even index is the RoCE v1 entry rxe lists before the v2 one
 * of the same address: the same GID, of type RoCE v1, which no AH or QP
 * may name (EINVAL, as rxe, which no longer sends RoCE v1, refuses it).
 * Listing it keeps GID 0 from being empty: UCX, like the IB specification,
 * takes GID 0 as the port's default and skips a port whose GID 0 is zero,
 * and perftest, picking a GID, prefers the v2 entry of an address to its
 * v1 one only when it can read both. */
static int query_entry(struct ibv_context *context, uint32_t port_num, int index, uint8_t *gid, uint32_t *type,
		       uint32_t *ifindex)
{
	int r = tbgo_query_gid(ctx_h(context), port_num, index, gid, type, ifindex);
	if (r == ENODATA && index % 2 == 0) {
		r = tbgo_query_gid(ctx_h(context), port_num, index + 1, gid, type, ifindex);
		if (r == 0 && type)
			*type = IBV_GID_TYPE_ROCE_V1;
		if (r) {
			memset(gid, 0, 16);
			r = ENODATA;
		}
	}
	return r;
}

int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
	TB_GUARD_NEG();
	if (!context || !gid)
		return -1;
	int r = query_entry(context, port_num, index, gid->raw, NULL, NULL);
	/* An empty entry reads as zeros, as rdma-core reads rxe's sysfs. */
	if (r == ENODATA)
		return 0;
	if (r) {
		errno = r;
		return -1;
	}
	return 0;
}

int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	TB_GUARD_ERR();
	if (!context || !entry || flags)
		return EINVAL;
	if (entry_size < sizeof(*entry))
		return EINVAL;
	memset(entry, 0, entry_size);
	uint32_t type = 0, ifindex = 0;
	int r = query_entry(context, port_num, (int)gid_index, entry->gid.raw, &type, &ifindex);
	if (r)
		return r;
	entry->gid_index = gid_index;
	entry->port_num = port_num;
	entry->gid_type = type;
	entry->ndev_ifindex = ifindex;
	return 0;
}

ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
			     size_t max_entries, uint32_t flags, size_t entry_size)
{
	TB_GUARD_NEGERR();
	if (!context || (max_entries && !entries) || flags || entry_size < sizeof(*entries))
		return -EINVAL;
	int n = tbgo_gid_table_len(ctx_h(context));
	size_t out = 0;
	for (int i = 0; i < n; i++) {
		struct ibv_gid_entry e;
		memset(&e, 0, sizeof e);
		uint32_t type = 0, ifindex = 0;
		if (query_entry(context, 1, i, e.gid.raw, &type, &ifindex))
			continue;
		if (out == max_entries)
			return -EINVAL;
		e.gid_index = i;
		e.port_num = 1;
		e.gid_type = type;
		e.ndev_ifindex = ifindex;
		memcpy((char *)entries + out * entry_size, &e, sizeof e);
		out++;
	}
	return out;
}

/* Private to rdma-core (ibv_devinfo calls it): *type is its sysfs GID
 * type, 0 for IB/RoCE v1 and 1 for RoCE v2. */
#define TB_GID_TYPE_SYSFS_IB_ROCE_V1 0
#define TB_GID_TYPE_SYSFS_ROCE_V2 1
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index, int *type)
{
	TB_GUARD_NEG();
	if (!context || !type)
		return -1;
	union ibv_gid g;
	uint32_t t = 0;
	int r = query_entry(context, port_num, (int)index, g.raw, &t, NULL);
	if (r) {
		errno = r == ENODATA ? EINVAL : r;
		return -1;
	}
	*type = t == IBV_GID_TYPE_ROCE_V1 ? TB_GID_TYPE_SYSFS_IB_ROCE_V1 : TB_GID_TYPE_SYSFS_ROCE_V2;
	return 0;
}

int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index, __be16 *pkey)
{
	if (!context || !pkey || port_num != 1 || index != 0)
		return -1;
	*pkey = htons(0xffff);
	return 0;
}

int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)
{
	if (!context || port_num != 1)
		return -EINVAL;
	return ntohs(pkey) == 0xffff ? 0 : -ENOENT;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	TB_GUARD_PTR();
	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	int err = 0;
	struct ibv_pd *pd = tbgo_alloc_pd(ctx_h(context), &err);
	if (!pd)
		errno = err;
	return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	TB_GUARD_ERR();
	if (!pd)
		return EINVAL;
	return tbgo_dealloc_pd(TB_H(pd, tb_pd));
}

static struct ibv_mr *reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	TB_GUARD_PTR();
	if (!pd) {
		errno = EINVAL;
		return NULL;
	}
	int err = 0;
	struct ibv_mr *mr = tbgo_reg_mr(TB_H(pd, tb_pd), addr, length, iova, access, &err);
	if (!mr)
		errno = err;
	return mr;
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return reg_mr(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return reg_mr(pd, addr, length, iova, (unsigned int)access);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	return reg_mr(pd, addr, length, iova, access);
}

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd,
				 int access)
{
	(void)pd; (void)offset; (void)length; (void)iova; (void)fd; (void)access;
	errno = EOPNOTSUPP;
	return NULL;
}

int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	(void)mr; (void)flags; (void)pd; (void)addr; (void)length; (void)access;
	errno = EOPNOTSUPP;
	return IBV_REREG_MR_ERR_INPUT;
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	TB_GUARD_ERR();
	if (!mr)
		return EINVAL;
	return tbgo_dereg_mr(TB_H(mr, tb_mr));
}

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	TB_GUARD_PTR();
	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	int fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (fd < 0)
		return NULL;
	int err = 0;
	struct ibv_comp_channel *ch = tbgo_create_comp_channel(ctx_h(context), fd, &err);
	if (!ch) {
		close(fd);
		errno = err;
	}
	return ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	TB_GUARD_ERR();
	if (!channel)
		return EINVAL;
	int fd = channel->fd;
	int r = tbgo_destroy_comp_channel(TB_H(channel, tb_channel));
	if (!r)
		close(fd);
	return r;
}

static struct ibv_cq *create_cq(struct ibv_context *context, int cqe, void *cq_context,
				struct ibv_comp_channel *channel, int comp_vector, uint64_t wc_flags)
{
	TB_GUARD_PTR();
	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	int err = 0;
	struct ibv_cq *cq = tbgo_create_cq(ctx_h(context), cqe, cq_context,
					   channel ? TB_H(channel, tb_channel) : 0, comp_vector, wc_flags, &err);
	if (!cq) {
		errno = err;
		return NULL;
	}
	pthread_mutex_init(&cq->mutex, NULL);
	pthread_cond_init(&cq->cond, NULL);
	return cq;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	return create_cq(context, cqe, cq_context, channel, comp_vector, 0);
}

/* The verbs_context create_cq_ex op (ibv_create_cq_ex is inline). */
struct ibv_cq_ex *tb_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr)
{
	if (!attr) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	const uint64_t supported = IBV_WC_STANDARD_FLAGS;
	if (attr->wc_flags & ~supported) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return (struct ibv_cq_ex *)create_cq(context, (int)attr->cqe, attr->cq_context, attr->channel,
					     (int)attr->comp_vector, attr->wc_flags);
}

int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	(void)cq; (void)cqe;
	return EOPNOTSUPP;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	TB_GUARD_ERR();
	if (!cq)
		return EINVAL;
	return tbgo_destroy_cq(TB_H(cq, tb_cq));
}

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	TB_GUARD_NEG();
	if (!channel || !cq || !cq_context) {
		errno = EINVAL;
		return -1;
	}
	tbgo_channel_sleeping(TB_H(channel, tb_channel));
	for (;;) {
		if (tb_eventfd_take(channel->fd))
			return -1;
		if (tbgo_channel_pop(TB_H(channel, tb_channel), cq, cq_context) == 0)
			return 0;
		/* The event belonged to a CQ destroyed since: wait for the next. */
	}
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	TB_GUARD_VOID();
	if (!cq)
		return;
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
	tbgo_ack_cq_events(TB_H(cq, tb_cq), nevents);
}

int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	TB_GUARD_NEG();
	if (!context || !event) {
		errno = EINVAL;
		return -1;
	}
	for (;;) {
		if (tb_eventfd_take(context->async_fd))
			return -1;
		if (tbgo_pop_async_event(ctx_h(context), event) == 0)
			return 0;
	}
}

void ibv_ack_async_event(struct ibv_async_event *event) { (void)event; }

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *srq_init_attr)
{
	TB_GUARD_PTR();
	if (!pd) {
		errno = EINVAL;
		return NULL;
	}
	int err = 0;
	struct ibv_srq *srq = tbgo_create_srq(TB_H(pd, tb_pd), srq_init_attr, &err);
	if (!srq) {
		errno = err;
		return NULL;
	}
	pthread_mutex_init(&srq->mutex, NULL);
	pthread_cond_init(&srq->cond, NULL);
	return srq;
}

int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr, int srq_attr_mask)
{
	TB_GUARD_ERR();
	if (!srq)
		return EINVAL;
	return tbgo_modify_srq(TB_H(srq, tb_srq), srq_attr, srq_attr_mask);
}

int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr)
{
	TB_GUARD_ERR();
	if (!srq)
		return EINVAL;
	return tbgo_query_srq(TB_H(srq, tb_srq), srq_attr);
}

int ibv_destroy_srq(struct ibv_srq *srq)
{
	TB_GUARD_ERR();
	if (!srq)
		return EINVAL;
	return tbgo_destroy_srq(TB_H(srq, tb_srq));
}

static uintptr_t cq_h(struct ibv_cq *cq) { return cq ? TB_H(cq, tb_cq) : 0; }

static struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr_ex *a, int ex)
{
	TB_GUARD_PTR();
	if (!pd || !a) {
		errno = EINVAL;
		return NULL;
	}
	int err = 0;
	struct ibv_qp *qp = tbgo_create_qp(TB_H(pd, tb_pd), cq_h(a->send_cq), cq_h(a->recv_cq),
					   a->srq ? TB_H(a->srq, tb_srq) : 0, a, ex, &err);
	if (!qp) {
		errno = err;
		return NULL;
	}
	pthread_mutex_init(&qp->mutex, NULL);
	pthread_cond_init(&qp->cond, NULL);
	return qp;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	if (!qp_init_attr) {
		errno = EINVAL;
		return NULL;
	}
	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof a);
	memcpy(&a, qp_init_attr, sizeof *qp_init_attr);
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = pd;
	struct ibv_qp *qp = create_qp(pd, &a, 0);
	if (qp)
		qp_init_attr->cap = a.cap;
	return qp;
}

/* The verbs_context create_qp_ex op. */
struct ibv_qp *tb_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *a)
{
	(void)context;
	if (!a) {
		errno = EINVAL;
		return NULL;
	}
	const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	if (a->comp_mask & ~known) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd) {
		errno = EINVAL;
		return NULL;
	}
	if ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	const uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
			     IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
			     IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
			     IBV_QP_EX_WITH_SEND_WITH_INV;
	int ex = 0;
	if (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		if (a->send_ops_flags & ~ops) {
			errno = EOPNOTSUPP;
			return NULL;
		}
		ex = 1;
	}
	return create_qp(a->pd, a, ex);
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct tb_qp *q = (struct tb_qp *)qp;
	return q && q->ex ? &q->qpx : NULL;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	TB_GUARD_ERR();
	if (!qp || !attr)
		return EINVAL;
	return tbgo_modify_qp(TB_H(qp, tb_qp), attr, attr_mask);
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask, struct ibv_qp_init_attr *init_attr)
{
	TB_GUARD_ERR();
	(void)attr_mask;
	if (!qp || !attr || !init_attr)
		return EINVAL;
	int r = tbgo_query_qp(TB_H(qp, tb_qp), attr, init_attr);
	if (!r)
		qp->state = attr->qp_state;
	return r;
}

int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp; (void)op; (void)flags;
	return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	TB_GUARD_ERR();
	if (!qp)
		return EINVAL;
	return tbgo_destroy_qp(TB_H(qp, tb_qp));
}

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	TB_GUARD_PTR();
	if (!pd || !attr) {
		errno = EINVAL;
		return NULL;
	}
	int err = 0;
	struct ibv_ah *ah = tbgo_create_ah(TB_H(pd, tb_pd), attr, &err);
	if (!ah)
		errno = err;
	return ah;
}

int ibv_destroy_ah(struct ibv_ah *ah)
{
	TB_GUARD_ERR();
	if (!ah)
		return EINVAL;
	return tbgo_destroy_ah(TB_H(ah, tb_ah));
}

/* ibv_init_ah_from_wc builds the AH that answers a UD datagram: the GRH
 * area of a RoCE v2 IPv4 datagram holds the IPv4 header in its last 20
 * bytes (as rxe writes it); an IPv6 one holds a GRH-shaped IPv6 header. */
int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc, struct ibv_grh *grh,
			struct ibv_ah_attr *ah_attr)
{
	if (!context || !wc || !grh || !ah_attr || port_num != 1)
		return -1;
	memset(ah_attr, 0, sizeof *ah_attr);
	ah_attr->port_num = port_num;
	ah_attr->is_global = 1;
	ah_attr->grh.hop_limit = 0xff;
	ah_attr->grh.sgid_index = 1;
	const uint8_t *raw = (const uint8_t *)grh;
	const uint8_t *ip4 = raw + 20;
	if ((ip4[0] >> 4) == 4) {
		uint8_t *d = ah_attr->grh.dgid.raw;
		memset(d, 0, 10);
		d[10] = d[11] = 0xff;
		memcpy(d + 12, ip4 + 12, 4); /* the datagram's source address */
		/* The local address it was sent to picks the source GID. */
		for (int i = 1; i < tbgo_gid_table_len(ctx_h(context)); i += 2) {
			union ibv_gid g;
			if (tbgo_query_gid(ctx_h(context), 1, i, g.raw, NULL, NULL) == 0 &&
			    memcmp(g.raw + 12, ip4 + 16, 4) == 0 && g.raw[10] == 0xff && g.raw[11] == 0xff) {
				ah_attr->grh.sgid_index = i;
				break;
			}
		}
	} else if ((raw[0] >> 4) == 6) {
		memcpy(ah_attr->grh.dgid.raw, grh->sgid.raw, 16);
		ah_attr->grh.flow_label = ntohl(grh->version_tclass_flow) & 0xfffff;
		ah_attr->grh.traffic_class = (ntohl(grh->version_tclass_flow) >> 20) & 0xff;
	} else if (wc->wc_flags & IBV_WC_GRH) {
		return -1;
	}
	return 0;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port_num)
{
	struct ibv_ah_attr a;
	if (!pd || ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &a)) {
		errno = EINVAL;
		return NULL;
	}
	return ibv_create_ah(pd, &a);
}

int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)qp; (void)gid; (void)lid;
	return EOPNOTSUPP;
}

int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)qp; (void)gid; (void)lid;
	return EOPNOTSUPP;
}

/* fork(): tbrdma pins nothing, so there is nothing to protect; but a child
 * of a process running the Go runtime cannot use the library at all
 * (docs/cabi.md). The calls succeed so that UCX and libfabric go on. */
int ibv_fork_init(void) { return 0; }
enum ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_DISABLED; }
int ibv_dontfork_range(void *base, size_t size) { (void)base; (void)size; return 0; }
int ibv_dofork_range(void *base, size_t size) { (void)base; (void)size; return 0; }

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	static const char *const s[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory management operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "TM error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
	};
	if ((unsigned)status < sizeof s / sizeof s[0] && s[status])
		return s[status];
	return "unknown";
}

const char *ibv_node_type_str(enum ibv_node_type node_type)
{
	switch (node_type) {
	case IBV_NODE_CA: return "InfiniBand channel adapter";
	case IBV_NODE_SWITCH: return "InfiniBand switch";
	case IBV_NODE_ROUTER: return "InfiniBand router";
	case IBV_NODE_RNIC: return "iWARP NIC";
	case IBV_NODE_USNIC: return "usNIC";
	case IBV_NODE_USNIC_UDP: return "usNIC UDP";
	case IBV_NODE_UNSPECIFIED: return "unspecified";
	default: return "unknown";
	}
}

const char *ibv_port_state_str(enum ibv_port_state port_state)
{
	switch (port_state) {
	case IBV_PORT_NOP: return "PORT_NOP";
	case IBV_PORT_DOWN: return "PORT_DOWN";
	case IBV_PORT_INIT: return "PORT_INIT";
	case IBV_PORT_ARMED: return "PORT_ARMED";
	case IBV_PORT_ACTIVE: return "PORT_ACTIVE";
	case IBV_PORT_ACTIVE_DEFER: return "PORT_ACTIVE_DEFER";
	default: return "invalid state";
	}
}

const char *ibv_event_type_str(enum ibv_event_type event)
{
	switch (event) {
	case IBV_EVENT_CQ_ERR: return "CQ error";
	case IBV_EVENT_QP_FATAL: return "local work queue catastrophic error";
	case IBV_EVENT_QP_REQ_ERR: return "invalid request local work queue error";
	case IBV_EVENT_QP_ACCESS_ERR: return "local access violation work queue error";
	case IBV_EVENT_COMM_EST: return "communication established";
	case IBV_EVENT_SQ_DRAINED: return "send queue drained";
	case IBV_EVENT_PATH_MIG: return "path migrated";
	case IBV_EVENT_PATH_MIG_ERR: return "path migration request error";
	case IBV_EVENT_DEVICE_FATAL: return "local catastrophic error";
	case IBV_EVENT_PORT_ACTIVE: return "port active";
	case IBV_EVENT_PORT_ERR: return "port error";
	case IBV_EVENT_LID_CHANGE: return "LID change";
	case IBV_EVENT_PKEY_CHANGE: return "P_Key change";
	case IBV_EVENT_SM_CHANGE: return "SM change";
	case IBV_EVENT_SRQ_ERR: return "SRQ catastrophic error";
	case IBV_EVENT_SRQ_LIMIT_REACHED: return "SRQ limit reached";
	case IBV_EVENT_QP_LAST_WQE_REACHED: return "last WQE reached";
	case IBV_EVENT_CLIENT_REREGISTER: return "client reregistration";
	case IBV_EVENT_GID_CHANGE: return "GID table change";
	case IBV_EVENT_WQ_FATAL: return "WQ fatal";
	default: return "unknown";
	}
}

/* Rates: the IB static rate codes and their multiples of 2.5 Gb/s. */
static const struct { enum ibv_rate rate; int mult; int mbps; } rates[] = {
	{IBV_RATE_2_5_GBPS, 1, 2500},    {IBV_RATE_5_GBPS, 2, 5000},      {IBV_RATE_10_GBPS, 4, 10000},
	{IBV_RATE_20_GBPS, 8, 20000},    {IBV_RATE_30_GBPS, 12, 30000},   {IBV_RATE_40_GBPS, 16, 40000},
	{IBV_RATE_60_GBPS, 24, 60000},   {IBV_RATE_80_GBPS, 32, 80000},   {IBV_RATE_120_GBPS, 48, 120000},
	{IBV_RATE_14_GBPS, 5, 14062},    {IBV_RATE_56_GBPS, 22, 56250},   {IBV_RATE_112_GBPS, 45, 112500},
	{IBV_RATE_168_GBPS, 67, 168750}, {IBV_RATE_25_GBPS, 10, 25781},   {IBV_RATE_100_GBPS, 40, 103125},
	{IBV_RATE_200_GBPS, 80, 206250}, {IBV_RATE_300_GBPS, 120, 309375}, {IBV_RATE_28_GBPS, 11, 28125},
	{IBV_RATE_50_GBPS, 20, 53125},   {IBV_RATE_400_GBPS, 160, 425000}, {IBV_RATE_600_GBPS, 240, 637500},
};

int ibv_rate_to_mult(enum ibv_rate rate)
{
	for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
		if (rates[i].rate == rate)
			return rates[i].mult;
	return -1;
}

enum ibv_rate mult_to_ibv_rate(int mult)
{
	for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
		if (rates[i].mult == mult)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(enum ibv_rate rate)
{
	for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
		if (rates[i].rate == rate)
			return rates[i].mbps;
	return -1;
}

enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
		if (rates[i].mbps == mbps)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

/* sysfs: tbrdma devices have no sysfs directory; the calls read real
 * files, so a program reading another path gets what is there. */
int ibv_get_sysfs_path(char *path, size_t len)
{
	const char *p = getenv("SYSFS_PATH");
	int n = snprintf(path, len, "%s", p ? p : "/sys");
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char *path;
	if (asprintf(&path, "%s/%s", dir, file) < 0)
		return -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	free(path);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size);
	close(fd);
	if (n <= 0)
		return -1;
	if ((size_t)n == size)
		n--;
	buf[n] = '\0';
	if (n > 0 && buf[n - 1] == '\n')
		buf[--n] = '\0';
	return (int)n;
}

int ibv_read_ibdev_sysfs_file(char *buf, size_t size, const char *ibdev, const char *fnfmt, ...)
{
	(void)buf; (void)size; (void)ibdev; (void)fnfmt;
	errno = ENOENT;
	return -1;
}

int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr, uint8_t eth_mac[6],
				uint16_t *vid)
{
	(void)context; (void)attr; (void)eth_mac; (void)vid;
	return EOPNOTSUPP;
}

struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	(void)context; (void)pd_handle;
	errno = EOPNOTSUPP;
	return NULL;
}
void ibv_unimport_pd(struct ibv_pd *pd) { (void)pd; }
struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	(void)pd; (void)mr_handle;
	errno = EOPNOTSUPP;
	return NULL;
}
void ibv_unimport_mr(struct ibv_mr *mr) { (void)mr; }
struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	(void)context; (void)dm_handle;
	errno = EOPNOTSUPP;
	return NULL;
}
void ibv_unimport_dm(struct ibv_dm *dm) { (void)dm; }
int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp; (void)ece;
	return EOPNOTSUPP;
}
int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp; (void)ece;
	return EOPNOTSUPP;
}
