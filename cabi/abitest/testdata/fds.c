/*
 * fds: the file descriptors C programs wait on are real ones.
 *
 * A completion channel's fd and a context's async_fd must be seen by poll()
 * and epoll, honour O_NONBLOCK (EAGAIN when nothing is pending), and the
 * blocking ibv_get_cq_event must be a cancellation point (rping cancels its
 * CQ thread while it waits there). Two RC QPs on the first device are
 * connected to each other (the device loops its own address back). Each
 * check prints "CHECK name ok" or "CHECK name FAIL ..."; the exit status is
 * the number of failures.
 *
 * Build: cc -O2 -o fds fds.c -libverbs -lpthread
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <infiniband/verbs.h>

static int failures;

static void check(const char *name, int ok, const char *why)
{
	if (ok) {
		printf("CHECK %s ok\n", name);
		return;
	}
	printf("CHECK %s FAIL %s\n", name, why);
	failures++;
}

static void die(const char *what)
{
	fprintf(stderr, "fds: %s: %s\n", what, strerror(errno));
	exit(100);
}

static void to_rts(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
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

static struct ibv_comp_channel *blocking_ch;
static volatile int thread_waiting;

static void *waiter(void *arg)
{
	(void)arg;
	struct ibv_cq *cq;
	void *ctx;
	thread_waiting = 1;
	ibv_get_cq_event(blocking_ch, &cq, &ctx); /* cancelled in here */
	return (void *)1;
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n == 0)
		die("no RDMA device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		die("ibv_open_device");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 1, &gid))
		die("ibv_query_gid");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	if (!pd || !ch)
		die("PD or channel");
	struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 16, (void *)0x5eed, ch, 0);
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	if (!scq || !rcq || !mr)
		die("CQ or MR");
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof ia);
	ia.send_cq = scq;
	ia.recv_cq = rcq;
	ia.cap.max_send_wr = 16;
	ia.cap.max_recv_wr = 16;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.qp_type = IBV_QPT_RC;
	struct ibv_qp *a = ibv_create_qp(pd, &ia);
	struct ibv_qp *b = ibv_create_qp(pd, &ia);
	if (!a || !b)
		die("ibv_create_qp");
	to_rts(a, b->qp_num, &gid);
	to_rts(b, a->qp_num, &gid);

	/* Non-blocking channel with nothing pending: EAGAIN, poll says no. */
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	errno = 0;
	int r = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	check("channel_nonblock_eagain", r == -1 && errno == EAGAIN, "ibv_get_cq_event on an empty O_NONBLOCK channel");
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	check("channel_poll_empty", poll(&pfd, 1, 0) == 0, "poll() says readable with nothing pending");

	/* Armed CQ + a SEND from a to b: the fd becomes readable. */
	int ep = epoll_create1(0);
	struct epoll_event ee = {.events = EPOLLIN, .data.u32 = 7};
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &ee))
		die("epoll");
	if (ibv_req_notify_cq(rcq, 0))
		die("ibv_req_notify_cq");
	struct ibv_sge rs = {.addr = (uintptr_t)buf + 1024, .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 11, .sg_list = &rs, .num_sge = 1}, *rbad;
	if ((errno = ibv_post_recv(b, &rw, &rbad)))
		die("ibv_post_recv");
	strcpy(buf, "ping");
	struct ibv_sge ss = {.addr = (uintptr_t)buf, .length = 5, .lkey = mr->lkey};
	struct ibv_send_wr sw = {.wr_id = 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED}, *sbad;
	if ((errno = ibv_post_send(a, &sw, &sbad)))
		die("ibv_post_send");
	struct epoll_event out;
	int k = epoll_wait(ep, &out, 1, 5000);
	check("channel_epoll_readable", k == 1 && out.data.u32 == 7, "epoll_wait saw no event within 5 s");
	pfd.revents = 0;
	check("channel_poll_readable", poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN), "poll() does not say readable");
	r = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	check("channel_event_cq", r == 0 && ev_cq == rcq && ev_ctx == (void *)0x5eed, "wrong CQ or context from ibv_get_cq_event");
	ibv_ack_cq_events(rcq, 1);
	struct ibv_wc wc;
	int got = 0;
	for (int i = 0; i < 1000000 && got == 0; i++)
		got = ibv_poll_cq(rcq, 1, &wc);
	check("channel_completion", got == 1 && wc.wr_id == 11 && wc.status == IBV_WC_SUCCESS && strcmp(buf + 1024, "ping") == 0,
	      "the SEND's receive completion");
	errno = 0;
	r = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	check("channel_one_event_per_arm", r == -1 && errno == EAGAIN, "a second event without re-arming");

	/* async_fd: O_NONBLOCK and nothing pending -> EAGAIN; poll says no. */
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	struct ibv_async_event ae;
	errno = 0;
	r = ibv_get_async_event(ctx, &ae);
	check("async_nonblock_eagain", r == -1 && errno == EAGAIN, "ibv_get_async_event with nothing pending");
	struct pollfd apfd = {.fd = ctx->async_fd, .events = POLLIN};
	check("async_poll_empty", poll(&apfd, 1, 0) == 0, "async_fd readable with nothing pending");

	/* A thread blocked in ibv_get_cq_event is cancelled there. */
	blocking_ch = ibv_create_comp_channel(ctx);
	if (!blocking_ch)
		die("second channel");
	pthread_t th;
	pthread_create(&th, NULL, waiter, NULL);
	while (!thread_waiting)
		usleep(1000);
	usleep(100000);
	pthread_cancel(th);
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 5;
	void *res = NULL;
	r = pthread_timedjoin_np(th, &res, &dl);
	check("get_cq_event_cancellable", r == 0 && res == PTHREAD_CANCELED, "the thread in ibv_get_cq_event was not cancelled within 5 s");

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	r = ibv_destroy_comp_channel(ch);
	check("destroy_channel", r == 0, "ibv_destroy_comp_channel after its CQ is gone");
	ibv_destroy_comp_channel(blocking_ch);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("%d failures\n", failures);
	return failures;
}
