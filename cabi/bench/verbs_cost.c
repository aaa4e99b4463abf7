/*
 * verbs_cost: what one ibv_post_send and one empty ibv_poll_cq cost through
 * whatever libibverbs.so.1 the loader finds (tbrdma's with tbrdma exec or
 * LD_LIBRARY_PATH). Two RC QPs on the first device are connected to each
 * other (the device loops packets to its own address back), so it needs no
 * peer. It prints one "name value unit" line per figure:
 *
 *   empty_poll_first   ns per ibv_poll_cq on an empty CQ, the first 16 in a
 *                      row (the library has not seen a spin yet)
 *   empty_poll_spin    ns per empty ibv_poll_cq once the program spins
 *                      (tbrdma then reads the socket in each empty poll)
 *   post_send          ns per ibv_post_send of an 8-byte inline RDMA WRITE,
 *                      one in 16 signaled, including waiting for those
 *                      completions
 *
 * Build: cc -O2 -o verbs_cost verbs_cost.c -libverbs
 * Run:   tbrdma exec ./verbs_cost [iterations]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void die(const char *what)
{
	fprintf(stderr, "verbs_cost: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void to_rts(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	if ((errno = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
		die("modify QP to INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.sgid_index = 1;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if ((errno = ibv_modify_qp(qp, &a,
				   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
		die("modify QP to RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if ((errno = ibv_modify_qp(qp, &a,
				   IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					   IBV_QP_MAX_QP_RD_ATOMIC)))
		die("modify QP to RTS");
}

int main(int argc, char **argv)
{
	long iters = argc > 1 ? atol(argv[1]) : 200000;
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n == 0)
		die("no RDMA device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		die("ibv_open_device");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 1, &gid))
		die("ibv_query_gid index 1");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4096, NULL, NULL, 0);
	struct ibv_cq *idle = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	static char buf[65536];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!pd || !cq || !idle || !mr)
		die("PD, CQ or MR");
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof ia);
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.cap.max_send_wr = 1024;
	ia.cap.max_recv_wr = 16;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.cap.max_inline_data = 64;
	ia.qp_type = IBV_QPT_RC;
	struct ibv_qp *a = ibv_create_qp(pd, &ia);
	struct ibv_qp *b = ibv_create_qp(pd, &ia);
	if (!a || !b)
		die("ibv_create_qp");
	to_rts(a, b->qp_num, &gid);
	to_rts(b, a->qp_num, &gid);

	struct ibv_wc wc[16];
	/* Empty polls, before the library sees a spin. */
	double sum = 0;
	int rounds = 2000;
	for (int r = 0; r < rounds; r++) {
		struct ibv_cq *fresh = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		double t0 = now_ns();
		for (int i = 0; i < 16; i++)
			if (ibv_poll_cq(fresh, 16, wc) != 0)
				die("poll of an empty CQ returned something");
		sum += now_ns() - t0;
		ibv_destroy_cq(fresh);
	}
	printf("empty_poll_first %.0f ns\n", sum / (rounds * 16.0));

	/* Empty polls once spinning. */
	for (int i = 0; i < 1000; i++)
		ibv_poll_cq(idle, 16, wc);
	double t0 = now_ns();
	for (long i = 0; i < iters; i++)
		if (ibv_poll_cq(idle, 16, wc) != 0)
			die("poll of an empty CQ returned something");
	printf("empty_poll_spin %.0f ns\n", (now_ns() - t0) / iters);

	/* Posts: 8-byte inline WRITEs from a to b, one in 16 signaled. */
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.wr.rdma.remote_addr = (uintptr_t)buf + 4096;
	wr.wr.rdma.rkey = mr->rkey;
	long outstanding = 0;
	t0 = now_ns();
	for (long i = 0; i < iters; i++) {
		wr.wr_id = i;
		wr.send_flags = IBV_SEND_INLINE | ((i % 16) == 15 ? IBV_SEND_SIGNALED : 0);
		if ((errno = ibv_post_send(a, &wr, &bad)))
			die("ibv_post_send");
		if (wr.send_flags & IBV_SEND_SIGNALED)
			outstanding++;
		while (outstanding > 32) {
			int k = ibv_poll_cq(cq, 16, wc);
			if (k < 0)
				die("ibv_poll_cq");
			for (int j = 0; j < k; j++)
				if (wc[j].status != IBV_WC_SUCCESS) {
					fprintf(stderr, "verbs_cost: completion %s\n", ibv_wc_status_str(wc[j].status));
					return 1;
				}
			outstanding -= k;
		}
	}
	while (outstanding > 0) {
		int k = ibv_poll_cq(cq, 16, wc);
		if (k < 0)
			die("ibv_poll_cq");
		outstanding -= k;
	}
	printf("post_send %.0f ns\n", (now_ns() - t0) / iters);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_destroy_cq(idle);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
