/*
 * tbrdma_cm.h: the objects of the librdmacm half of the library.
 *
 * An rdma_event_channel, rdma_cm_id and rdma_cm_event a program holds are
 * the first member of a tb_cm_* wrapper; h is the runtime/cgo.Handle of the
 * Go state behind it (rdmacm.go). The Go side allocates and frees these
 * wrappers; the C side (rdmacm.c) does what touches unions (the sockaddrs
 * of rdma_addr, the param union of rdma_cm_event) through the helpers
 * declared here, which the Go side calls.
 *
 * Only declarations here: rdmacm.go, which has //export functions,
 * includes this header in its cgo preamble.
 */
#ifndef TBRDMA_CM_H
#define TBRDMA_CM_H

#include <stdint.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <infiniband/verbs.h>
#include <infiniband/sa.h>
#include <rdma/rdma_cma.h>

struct tb_cm_channel {
	struct rdma_event_channel ch; /* ch.fd: an eventfd in semaphore mode, one count per event */
	uintptr_t h;
};

struct tb_cm_id {
	struct rdma_cm_id id;
	uintptr_t h;
	int sync;                          /* created without a channel: calls wait for their event */
	struct ibv_qp_init_attr *ep_attr;  /* rdma_create_ep, passive: the QP rdma_get_request makes */
	struct ibv_sa_path_rec path;       /* id.route.path_rec points here once a route exists */
	struct ibv_ece local_ece;          /* rdma_set_local_ece; nothing carries it on the wire */
};

/* The private data of any CM message fits (the REP's 196 bytes are the
 * most). */
#define TB_CM_PDATA 256

struct tb_cm_event {
	struct rdma_cm_event ev;
	uint8_t pdata[TB_CM_PDATA];
};

/* An IP socket address, flattened: addr is IPv6 or IPv4-mapped, port in
 * host order, family AF_INET, AF_INET6 or 0 (none). */
struct tb_cm_sa {
	uint8_t addr[16];
	uint32_t scope_id;
	uint16_t port;
	uint16_t family;
};

/* What the Go side tells the C side about an ID's addresses and route. */
struct tb_cm_route {
	struct tb_cm_sa src, dst;
	uint8_t sgid[16], dgid[16];
	int have_path;     /* fill route.path_rec (one path) */
	uint8_t mtu;       /* enum ibv_mtu */
	uint8_t hop_limit;
	uint8_t tclass;
	uint32_t flow_label;
};

/* The UD part of an event (rdma_ud_param less its private data). */
struct tb_cm_ud {
	uint8_t dgid[16];
	uint8_t sgid_index;
	uint8_t hop_limit;
	uint8_t tclass;
	uint32_t flow_label;
	uint32_t qp_num;
	uint32_t qkey;
};

/* C helpers the Go side calls (rdmacm.c). */
int tb_sa_from(const struct sockaddr *sa, struct tb_cm_sa *out);
void tb_cm_set_route(struct tb_cm_id *id, const struct tb_cm_route *r);
struct rdma_conn_param *tb_cm_ev_conn(struct rdma_cm_event *ev);
void tb_cm_ev_ud(struct rdma_cm_event *ev, const struct tb_cm_ud *ud, const void *pdata, uint8_t len);
struct ibv_context *tb_cm_open_device(struct ibv_device *dev, int *err);
struct ibv_pd *tb_cm_alloc_pd(struct ibv_context *ctx, int *err);
uintptr_t tb_cm_ctx_handle(struct ibv_context *ctx);
uintptr_t tb_cm_pd_handle(struct ibv_pd *pd);
uintptr_t tb_cm_cq_handle(struct ibv_cq *cq);
uintptr_t tb_cm_srq_handle(struct ibv_srq *srq);

#endif
