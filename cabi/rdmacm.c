/*
 * rdmacm.c: librdmacm's entry points (rsockets are in rsocket.c).
 *
 * Each call does here what librdmacm does in user space (its argument
 * checks, synchronous mode, the CQs and channels rdma_create_qp makes,
 * rdma_getaddrinfo over the system resolver, rdma_create_ep) and hands
 * what the kernel's rdma_cm would do to the Go side (rdmacm.go, the
 * tbgo_cm_* functions), which returns 0 or an errno; this file turns that
 * into librdmacm's convention: -1 with errno set, or NULL with errno set.
 *
 * Synchronous mode: an ID created without a channel gets a private one,
 * and each call that starts something waits for the event that finishes
 * it (left in id->event), as librdmacm's ucma_complete does.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "tbrdma.h"
#include "tbrdma_cm.h"
#include "_cgo_export.h"

#define CM(id) ((struct tb_cm_id *)(id))
#define CH_H(ch) (((struct tb_cm_channel *)(ch))->h)
/* A destroyed ID or channel keeps its memory a while with h zeroed
 * (rdmacm.go, quarantine): calls on it fail with EINVAL. */
#define BAD_ID(id) (!(id) || !CM(id)->h)
#define BAD_CH(ch) (!(ch) || !CH_H(ch))

static int fail(int e)
{
	if (!e)
		return 0;
	errno = e;
	return -1;
}

/* --- helpers the Go side calls --- */

int tb_sa_from(const struct sockaddr *sa, struct tb_cm_sa *out)
{
	memset(out, 0, sizeof *out);
	if (!sa)
		return 0;
	switch (sa->sa_family) {
	case AF_INET: {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
		out->addr[10] = out->addr[11] = 0xff;
		memcpy(out->addr + 12, &s->sin_addr, 4);
		out->port = ntohs(s->sin_port);
		out->family = AF_INET;
		return 0;
	}
	case AF_INET6: {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
		memcpy(out->addr, &s->sin6_addr, 16);
		out->port = ntohs(s->sin6_port);
		out->scope_id = s->sin6_scope_id;
		out->family = AF_INET6;
		return 0;
	}
	case AF_IB:
		return EAFNOSUPPORT;
	default:
		return EINVAL;
	}
}

static void sa_to(struct sockaddr_storage *ss, const struct tb_cm_sa *a)
{
	memset(ss, 0, sizeof *ss);
	if (a->family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(a->port);
		memcpy(&s->sin_addr, a->addr + 12, 4);
	} else if (a->family == AF_INET6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(a->port);
		s->sin6_scope_id = a->scope_id;
		memcpy(&s->sin6_addr, a->addr, 16);
	}
}

void tb_cm_set_route(struct tb_cm_id *t, const struct tb_cm_route *r)
{
	struct rdma_route *rt = &t->id.route;
	if (r->src.family)
		sa_to(&rt->addr.src_storage, &r->src);
	if (r->dst.family)
		sa_to(&rt->addr.dst_storage, &r->dst);
	memcpy(rt->addr.addr.ibaddr.sgid.raw, r->sgid, 16);
	memcpy(rt->addr.addr.ibaddr.dgid.raw, r->dgid, 16);
	rt->addr.addr.ibaddr.pkey = htons(0xffff);
	if (!r->have_path)
		return;
	struct ibv_sa_path_rec *p = &t->path;
	memset(p, 0, sizeof *p);
	memcpy(p->dgid.raw, r->dgid, 16);
	memcpy(p->sgid.raw, r->sgid, 16);
	p->flow_label = htonl(r->flow_label);
	p->hop_limit = r->hop_limit;
	p->traffic_class = r->tclass;
	p->reversible = 1;
	p->numb_path = 1;
	p->pkey = htons(0xffff);
	p->mtu_selector = 2; /* exactly */
	p->mtu = r->mtu;
	p->rate_selector = 2;
	p->rate = IBV_RATE_100_GBPS;
	p->packet_life_time_selector = 2;
	p->packet_life_time = 18; /* CMA_IBOE_PACKET_LIFETIME */
	rt->path_rec = p;
	rt->num_paths = 1;
}

struct rdma_conn_param *tb_cm_ev_conn(struct rdma_cm_event *ev) { return &ev->param.conn; }

void tb_cm_ev_ud(struct rdma_cm_event *ev, const struct tb_cm_ud *ud, const void *pdata, uint8_t len)
{
	struct rdma_ud_param *p = &ev->param.ud;
	p->private_data = pdata;
	p->private_data_len = len;
	p->qp_num = ud->qp_num;
	p->qkey = ud->qkey;
	struct ibv_ah_attr *a = &p->ah_attr;
	memset(a, 0, sizeof *a);
	a->is_global = 1;
	a->port_num = 1;
	memcpy(a->grh.dgid.raw, ud->dgid, 16);
	a->grh.sgid_index = ud->sgid_index;
	a->grh.hop_limit = ud->hop_limit;
	a->grh.traffic_class = ud->tclass;
	a->grh.flow_label = ud->flow_label;
}

struct ibv_context *tb_cm_open_device(struct ibv_device *dev, int *err)
{
	struct ibv_context *c = ibv_open_device(dev);
	if (!c)
		*err = errno ? errno : ENODEV;
	return c;
}

struct ibv_pd *tb_cm_alloc_pd(struct ibv_context *ctx, int *err)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		*err = errno;
	return pd;
}

uintptr_t tb_cm_ctx_handle(struct ibv_context *ctx) { return TB_CTX(ctx)->h; }
uintptr_t tb_cm_pd_handle(struct ibv_pd *pd) { return pd ? ((struct tb_pd *)pd)->h : 0; }
uintptr_t tb_cm_cq_handle(struct ibv_cq *cq) { return cq ? ((struct tb_cq *)cq)->h : 0; }
uintptr_t tb_cm_srq_handle(struct ibv_srq *srq) { return srq ? ((struct tb_srq *)srq)->h : 0; }

/* --- event channels and events --- */

struct rdma_event_channel *rdma_create_event_channel(void)
{
	TB_GUARD_PTR();
	int err = 0;
	struct rdma_event_channel *ch = tbgo_cm_create_channel(&err);
	if (!ch)
		errno = err;
	return ch;
}

void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	TB_GUARD_VOID();
	if (!BAD_CH(channel))
		tbgo_cm_destroy_channel(CH_H(channel));
}

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	TB_GUARD_NEG();
	if (BAD_CH(channel) || !event)
		return fail(EINVAL);
	for (;;) {
		if (tb_eventfd_take(channel->fd))
			return -1;
		int r = tbgo_cm_get_event(CH_H(channel), event);
		if (r != EAGAIN)
			return fail(r);
		/* The count stood for an event moved to another channel or
		 * dropped with its ID: wait for the next. */
	}
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	TB_GUARD_NEG();
	if (!event)
		return fail(EINVAL);
	tbgo_cm_ack_event(event);
	return 0;
}

const char *rdma_event_str(enum rdma_cm_event_type event)
{
	switch (event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
	case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
	case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
	case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
	case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
	case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
	case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
	case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
	case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
	case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
	case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
	case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
	case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
	case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
	case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
	case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
	default: return "UNKNOWN EVENT";
	}
}

/* In synchronous mode, waits for the event that finishes the call just
 * made and leaves it in id->event; a failure event becomes the call's
 * errno (REJECTED: ECONNREFUSED). */
static int complete(struct rdma_cm_id *id)
{
	if (!CM(id)->sync)
		return 0;
	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	if (rdma_get_cm_event(id->channel, &id->event))
		return -1;
	int st = id->event->status;
	if (!st)
		return 0;
	if (id->event->event == RDMA_CM_EVENT_REJECTED)
		return fail(ECONNREFUSED);
	return fail(st < 0 ? -st : st);
}

/* --- IDs --- */

/* At exit, the IDs the program did not destroy are destroyed, as the
 * kernel destroys a process's IDs when it ends: connected peers get a DREQ
 * (DISCONNECTED at once) and connections being set up a REJ, instead of
 * finding out only when their QPs time out. A process killed by a signal
 * runs no exit handlers: its peers see the QP's retries run out. */
static void cm_at_exit(void)
{
	if (!tb_forked)
		tbgo_cm_exit();
}

static void cm_register_exit(void) { atexit(cm_at_exit); }

static int create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		     enum rdma_port_space ps, enum ibv_qp_type qp_type)
{
	TB_GUARD_NEG();
	if (!id || (channel && BAD_CH(channel)))
		return fail(EINVAL);
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, cm_register_exit);
	return fail(tbgo_cm_create_id(channel ? CH_H(channel) : 0, context, ps, qp_type, id));
}

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		   enum rdma_port_space ps)
{
	enum ibv_qp_type qpt = (ps == RDMA_PS_IPOIB || ps == RDMA_PS_UDP) ? IBV_QPT_UD : IBV_QPT_RC;
	return create_id(channel, id, context, ps, qpt);
}

int rdma_destroy_id(struct rdma_cm_id *id)
{
	TB_GUARD_NEG();
	if (BAD_ID(id))
		return fail(EINVAL);
	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	struct ibv_qp_init_attr *ep = CM(id)->ep_attr;
	CM(id)->ep_attr = NULL;
	int r = tbgo_cm_destroy_id(CM(id)->h); /* may free id */
	free(ep);
	return fail(r);
}

int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	TB_GUARD_NEG();
	if (BAD_ID(id) || !addr)
		return fail(EINVAL);
	struct tb_cm_sa sa;
	int r = tb_sa_from(addr, &sa);
	if (r)
		return fail(r);
	return fail(tbgo_cm_bind(CM(id)->h, &sa));
}

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr, int timeout_ms)
{
	TB_GUARD_NEG();
	if (BAD_ID(id) || !dst_addr)
		return fail(EINVAL);
	struct tb_cm_sa src, dst;
	int r = tb_sa_from(dst_addr, &dst);
	if (!r)
		r = tb_sa_from(src_addr, &src);
	if (r)
		return fail(r);
	r = tbgo_cm_resolve_addr(CM(id)->h, src_addr ? &src : NULL, &dst, timeout_ms);
	if (r)
		return fail(r);
	return complete(id);
}

int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	TB_GUARD_NEG();
	if (BAD_ID(id))
		return fail(EINVAL);
	int r = tbgo_cm_resolve_route(CM(id)->h, timeout_ms);
	if (r)
		return fail(r);
	return complete(id);
}

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	TB_GUARD_NEG();
	if (BAD_ID(id))
		return fail(EINVAL);
	return fail(tbgo_cm_listen(CM(id)->h, backlog));
}

int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	TB_GUARD_NEG();
	if (BAD_ID(listen) || !id || !CM(listen)->sync)
		return fail(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(listen->channel, &ev))
		return -1;
	int err = 0;
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		err = ECONNREFUSED;
	else if (ev->status)
		err = ev->status < 0 ? -ev->status : ev->status;
	else if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		err = EINVAL;
	if (!err && CM(listen)->ep_attr) {
		struct ibv_qp_init_attr a = *CM(listen)->ep_attr;
		if (rdma_create_qp(ev->id, listen->pd, &a))
			err = errno;
	}
	if (err) {
		listen->event = ev;
		return fail(err);
	}
	*id = ev->id;
	ev->id->event = ev;
	return 0;
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	TB_GUARD_NEG();
	if (BAD_ID(id))
		return fail(EINVAL);
	int r = tbgo_cm_connect(CM(id)->h, conn_param);
	if (r)
		return fail(r);
	return complete(id);
}

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	TB_GUARD_NEG();
	if (BAD_ID(id))
		return fail(EINVAL);
	int r = tbgo_cm_accept(CM(id)->h, conn_param);
	if (r)
		return fail(r);
	if (id->qp_type == IBV_QPT_UD) {
		if (CM(id)->sync && id->event) {
			rdma_ack_cm_event(id->event);
			id->event = NULL;
		}
		return 0;
	}
	return complete(id);
}

int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	TB_GUARD_NEG();
	if (BAD_ID(id))
		return fail(EINVAL);
	return fail(tbgo_cm_reject(CM(id)->h, (void *)private_data, private_data_len));
}

/* ECE (enhanced connection establishment) options are not carried: the
 * REJ goes out with the consumer-defined reason, as rdma_reject's. */
int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return rdma_reject(id, private_data, private_data_len);
}

int rdma_establish(struct rdma_cm_id *id)
{
	TB_GUARD_NEG();
	if (BAD_ID(id) || id->qp)
		return fail(EINVAL);
	return fail(tbgo_cm_establish(CM(id)->h));
}

int rdma_disconnect(struct rdma_cm_id *id)
{
	TB_GUARD_NEG();
	if (BAD_ID(id))
		return fail(EINVAL);
	int r = tbgo_cm_disconnect(CM(id)->h);
	if (r)
		return fail(r);
	return complete(id);
}

/* rdma_notify tells the CM of a QP event: COMM_EST (data arrived before
 * the RTU) needs nothing, the RTU or the first packet establishes the
 * connection in tbrdma's CM by itself; path migration does not exist. */
int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	if (BAD_ID(id))
		return fail(EINVAL);
	if (event == IBV_EVENT_COMM_EST || event == IBV_EVENT_PATH_MIG)
		return 0;
	return fail(EINVAL);
}

int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	TB_GUARD_NEG();
	if (BAD_ID(id))
		return fail(EINVAL);
	if ((CM(id)->sync && !channel) || (channel && BAD_CH(channel)))
		return fail(EINVAL);
	if (CM(id)->sync && id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	return fail(tbgo_cm_migrate(CM(id)->h, channel ? CH_H(channel) : 0));
}

int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	TB_GUARD_NEG();
	if (BAD_ID(id))
		return fail(EINVAL);
	return fail(tbgo_cm_set_option(CM(id)->h, level, optname, optval, optlen));
}

int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	TB_GUARD_NEG();
	if (BAD_ID(id) || !qp_attr || !qp_attr_mask)
		return fail(EINVAL);
	return fail(tbgo_cm_init_qp_attr(CM(id)->h, qp_attr, qp_attr_mask));
}

static __be16 sa_port(const struct sockaddr *sa)
{
	switch (sa->sa_family) {
	case AF_INET: return ((const struct sockaddr_in *)sa)->sin_port;
	case AF_INET6: return ((const struct sockaddr_in6 *)sa)->sin6_port;
	default: return 0;
	}
}

__be16 rdma_get_src_port(struct rdma_cm_id *id) { return BAD_ID(id) ? 0 : sa_port(&id->route.addr.src_addr); }
__be16 rdma_get_dst_port(struct rdma_cm_id *id) { return BAD_ID(id) ? 0 : sa_port(&id->route.addr.dst_addr); }

struct ibv_context **rdma_get_devices(int *num_devices)
{
	TB_GUARD_PTR();
	int err = 0;
	struct ibv_context **l = tbgo_cm_get_devices(num_devices, &err);
	if (!l) {
		errno = err;
		if (num_devices)
			*num_devices = 0;
	}
	return l;
}

void rdma_free_devices(struct ibv_context **list) { free(list); }

/* --- QPs, CQs, SRQs --- */

static void destroy_cqs(struct rdma_cm_id *id)
{
	if (id->recv_cq) {
		ibv_destroy_cq(id->recv_cq);
		if (id->send_cq && id->send_cq != id->recv_cq)
			ibv_destroy_cq(id->send_cq);
	} else if (id->send_cq) {
		ibv_destroy_cq(id->send_cq);
	}
	id->recv_cq = id->send_cq = NULL;
	if (id->recv_cq_channel) {
		ibv_destroy_comp_channel(id->recv_cq_channel);
		if (id->send_cq_channel && id->send_cq_channel != id->recv_cq_channel)
			ibv_destroy_comp_channel(id->send_cq_channel);
	} else if (id->send_cq_channel) {
		ibv_destroy_comp_channel(id->send_cq_channel);
	}
	id->recv_cq_channel = id->send_cq_channel = NULL;
}

/* A CQ of size entries with its own completion channel, its context the
 * ID (rdma_get_send_comp and rdma_get_recv_comp check that). */
static int make_cq(struct rdma_cm_id *id, uint32_t size, struct ibv_cq **cq, struct ibv_comp_channel **ch)
{
	*ch = ibv_create_comp_channel(id->verbs);
	if (!*ch)
		return -1;
	*cq = ibv_create_cq(id->verbs, (int)size, id, *ch, 0);
	if (!*cq) {
		int e = errno;
		ibv_destroy_comp_channel(*ch);
		*ch = NULL;
		errno = e;
		return -1;
	}
	return 0;
}

int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	TB_GUARD_NEG();
	if (BAD_ID(id) || !attr || id->qp)
		return fail(EINVAL);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
		attr->pd = id->pd;
	} else if (id->verbs != attr->pd->context) {
		return fail(EINVAL);
	}
	if (!attr->pd || !id->verbs)
		return fail(EINVAL); /* no device yet: bind or resolve the address first */
	const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	if (attr->comp_mask & ~known)
		return fail(EOPNOTSUPP);
	if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags)
		return fail(EOPNOTSUPP);
	const uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
			     IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
			     IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
			     IBV_QP_EX_WITH_SEND_WITH_INV;
	int ex = 0;
	if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		if (attr->send_ops_flags & ~ops)
			return fail(EOPNOTSUPP);
		ex = 1;
	}
	if ((id->recv_cq && attr->recv_cq && id->recv_cq != attr->recv_cq) ||
	    (id->send_cq && attr->send_cq && id->send_cq != attr->send_cq))
		return fail(EINVAL);

	/* Without CQs in the attributes, the ID gets its own, each with a
	 * completion channel, as librdmacm makes them. */
	int made_send = 0, made_recv = 0;
	if (!attr->recv_cq && !id->recv_cq && attr->cap.max_recv_wr) {
		if (make_cq(id, attr->cap.max_recv_wr, &id->recv_cq, &id->recv_cq_channel))
			return -1;
		made_recv = 1;
	}
	if (!attr->send_cq && !id->send_cq && attr->cap.max_send_wr) {
		if (make_cq(id, attr->cap.max_send_wr, &id->send_cq, &id->send_cq_channel)) {
			int e = errno;
			if (made_recv)
				destroy_cqs(id);
			return fail(e);
		}
		made_send = 1;
	}
	if (!attr->send_cq)
		attr->send_cq = id->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = id->recv_cq;
	if (id->srq && !attr->srq)
		attr->srq = id->srq;

	struct ibv_qp *qp = NULL;
	int r = tbgo_cm_create_qp(CM(id)->h, tb_cm_pd_handle(attr->pd), tb_cm_cq_handle(attr->send_cq),
				  tb_cm_cq_handle(attr->recv_cq), tb_cm_srq_handle(attr->srq), attr, ex, &qp);
	if (r) {
		if (made_send || made_recv)
			destroy_cqs(id);
		return fail(r);
	}
	pthread_mutex_init(&qp->mutex, NULL);
	pthread_cond_init(&qp->cond, NULL);
	id->pd = qp->pd;
	id->qp = qp;
	return 0;
}

int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	if (!id || !qp_init_attr)
		return fail(EINVAL);
	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof a);
	memcpy(&a, qp_init_attr, sizeof *qp_init_attr);
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = pd ? pd : id->pd;
	int r = rdma_create_qp_ex(id, &a);
	memcpy(qp_init_attr, &a, sizeof *qp_init_attr);
	return r;
}

void rdma_destroy_qp(struct rdma_cm_id *id)
{
	TB_GUARD_VOID();
	if (BAD_ID(id))
		return;
	tbgo_cm_destroy_qp(CM(id)->h);
	if (id->qp)
		ibv_destroy_qp(id->qp);
	id->qp = NULL;
	destroy_cqs(id);
}

int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	TB_GUARD_NEG();
	if (BAD_ID(id) || !attr || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE))
		return fail(EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = id->pd;
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	if (attr->srq_type != IBV_SRQT_BASIC)
		return fail(EOPNOTSUPP); /* XRC and tag matching SRQs do not exist here */
	if (!attr->pd)
		return fail(EINVAL);
	struct ibv_srq_init_attr a;
	memset(&a, 0, sizeof a);
	a.srq_context = attr->srq_context;
	a.attr = attr->attr;
	struct ibv_srq *srq = ibv_create_srq(attr->pd, &a);
	if (!srq)
		return -1;
	attr->attr = a.attr;
	if (!id->pd)
		id->pd = attr->pd;
	id->srq = srq;
	return 0;
}

int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	if (!id || !attr)
		return fail(EINVAL);
	struct ibv_srq_init_attr_ex a;
	memset(&a, 0, sizeof a);
	memcpy(&a, attr, sizeof *attr);
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	a.srq_type = IBV_SRQT_BASIC;
	a.pd = pd;
	int r = rdma_create_srq_ex(id, &a);
	memcpy(attr, &a, sizeof *attr);
	return r;
}

void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (BAD_ID(id))
		return;
	if (id->srq)
		ibv_destroy_srq(id->srq);
	id->srq = NULL;
	destroy_cqs(id);
}

/* --- endpoints --- */

int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
		   struct ibv_qp_init_attr *qp_init_attr)
{
	if (!id || !res)
		return fail(EINVAL);
	struct rdma_cm_id *cm;
	if (create_id(NULL, &cm, NULL, res->ai_port_space, res->ai_qp_type))
		return -1;
	if (res->ai_flags & RAI_PASSIVE) {
		if (rdma_bind_addr(cm, res->ai_src_addr))
			goto err;
		if (pd)
			cm->pd = pd;
		if (qp_init_attr) {
			struct ibv_qp_init_attr *a = malloc(sizeof *a);
			if (!a) {
				errno = ENOMEM;
				goto err;
			}
			*a = *qp_init_attr;
			a->qp_type = res->ai_qp_type;
			CM(cm)->ep_attr = a;
		}
		*id = cm;
		return 0;
	}
	if (rdma_resolve_addr(cm, res->ai_src_addr, res->ai_dst_addr, 2000))
		goto err;
	if (rdma_resolve_route(cm, 2000))
		goto err;
	if (qp_init_attr) {
		qp_init_attr->qp_type = res->ai_qp_type;
		if (rdma_create_qp(cm, pd, qp_init_attr))
			goto err;
	}
	*id = cm;
	return 0;
err: {
	int e = errno;
	rdma_destroy_ep(cm);
	errno = e;
	return -1;
}
}

void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (BAD_ID(id))
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

/* --- addresses --- */

static int copy_addr(struct sockaddr **dst, socklen_t *dst_len, const struct sockaddr *src, socklen_t len)
{
	*dst = malloc(len);
	if (!*dst)
		return EAI_MEMORY;
	memcpy(*dst, src, len);
	*dst_len = len;
	return 0;
}

/* rdma_getaddrinfo over the system's getaddrinfo (numeric addresses and
 * host names alike): the hints' QP type and port space become a socket
 * type and protocol, the first answer becomes the source address (with
 * RAI_PASSIVE) or the destination, and the answer's socket type and
 * protocol the QP type and port space when the hints give none. Errors
 * are getaddrinfo's EAI_* codes (for gai_strerror), or -1 with errno. */
int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	static const struct rdma_addrinfo none;
	if (!res || (!node && !service && !hints))
		return fail(EINVAL);
	const struct rdma_addrinfo *h = hints ? hints : &none;
	if (h->ai_family == AF_IB)
		return EAI_FAMILY; /* InfiniBand addresses: tbrdma is RoCE only */
	struct rdma_addrinfo *rai = calloc(1, sizeof *rai);
	if (!rai)
		return EAI_MEMORY;
	int r = 0;
	if (node || service) {
		struct addrinfo ah, *ai = NULL;
		memset(&ah, 0, sizeof ah);
		if (h->ai_flags & RAI_PASSIVE)
			ah.ai_flags |= AI_PASSIVE;
		if (h->ai_flags & RAI_NUMERICHOST)
			ah.ai_flags |= AI_NUMERICHOST;
		ah.ai_family = h->ai_family;
		switch (h->ai_qp_type) {
		case IBV_QPT_RC:
		case IBV_QPT_UC:
		case IBV_QPT_XRC_SEND:
		case IBV_QPT_XRC_RECV:
			ah.ai_socktype = SOCK_STREAM;
			break;
		case IBV_QPT_UD:
			ah.ai_socktype = SOCK_DGRAM;
			break;
		default:
			break;
		}
		switch (h->ai_port_space) {
		case RDMA_PS_TCP:
			ah.ai_protocol = IPPROTO_TCP;
			break;
		case RDMA_PS_UDP:
		case RDMA_PS_IPOIB:
			ah.ai_protocol = IPPROTO_UDP;
			break;
		case RDMA_PS_IB:
			if (ah.ai_socktype == SOCK_STREAM)
				ah.ai_protocol = IPPROTO_TCP;
			else if (ah.ai_socktype == SOCK_DGRAM)
				ah.ai_protocol = IPPROTO_UDP;
			break;
		default:
			break;
		}
		r = getaddrinfo(node, service, hints ? &ah : NULL, &ai);
		if (r) {
			free(rai);
			return r;
		}
		struct addrinfo *a = ai;
		while (a && a->ai_family != AF_INET && a->ai_family != AF_INET6)
			a = a->ai_next;
		if (!a) {
			freeaddrinfo(ai);
			free(rai);
			return EAI_FAMILY;
		}
		if (h->ai_qp_type)
			rai->ai_qp_type = h->ai_qp_type;
		else if (a->ai_socktype == SOCK_STREAM)
			rai->ai_qp_type = IBV_QPT_RC;
		else if (a->ai_socktype == SOCK_DGRAM)
			rai->ai_qp_type = IBV_QPT_UD;
		if (h->ai_port_space)
			rai->ai_port_space = h->ai_port_space;
		else if (a->ai_protocol == IPPROTO_TCP)
			rai->ai_port_space = RDMA_PS_TCP;
		else if (a->ai_protocol == IPPROTO_UDP)
			rai->ai_port_space = RDMA_PS_UDP;
		rai->ai_family = a->ai_family;
		if (h->ai_flags & RAI_PASSIVE) {
			rai->ai_flags = RAI_PASSIVE;
			if (a->ai_canonname)
				rai->ai_src_canonname = strdup(a->ai_canonname);
			r = copy_addr(&rai->ai_src_addr, &rai->ai_src_len, a->ai_addr, a->ai_addrlen);
		} else {
			if (a->ai_canonname)
				rai->ai_dst_canonname = strdup(a->ai_canonname);
			r = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, a->ai_addr, a->ai_addrlen);
		}
		freeaddrinfo(ai);
	} else {
		rai->ai_flags = h->ai_flags;
		rai->ai_family = h->ai_family;
		rai->ai_qp_type = h->ai_qp_type;
		rai->ai_port_space = h->ai_port_space;
		if (h->ai_dst_len && h->ai_dst_addr)
			r = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, h->ai_dst_addr, h->ai_dst_len);
	}
	if (!r && !rai->ai_src_len && h->ai_src_len && h->ai_src_addr)
		r = copy_addr(&rai->ai_src_addr, &rai->ai_src_len, h->ai_src_addr, h->ai_src_len);
	if (r) {
		rdma_freeaddrinfo(rai);
		return r;
	}
	*res = rai;
	return 0;
}

void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;
		free(res->ai_connect);
		free(res->ai_route);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res);
		res = next;
	}
}

/* --- not supported --- */

/* Multicast needs multicast groups on the link and QPs attached to them,
 * which tbrdma does not have. */
int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	(void)id; (void)addr; (void)context;
	return fail(EOPNOTSUPP);
}

int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *mc_join_attr, void *context)
{
	(void)id; (void)mc_join_attr; (void)context;
	return fail(EOPNOTSUPP);
}

int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	(void)id; (void)addr;
	return fail(EADDRNOTAVAIL); /* never joined */
}

/* ECE: librdmacm keeps the local options until the QP exists and reports
 * the peer's; tbrdma's CM sends none and receives none (as over rxe, whose
 * QPs have no ECE), so the peer's always read as zero. */
int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || id->qp || !ece || !ece->vendor_id || ece->comp_mask)
		return fail(EINVAL);
	CM(id)->local_ece = *ece;
	return 0;
}

int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || id->qp || !ece)
		return fail(EINVAL);
	memset(ece, 0, sizeof *ece);
	return 0;
}
