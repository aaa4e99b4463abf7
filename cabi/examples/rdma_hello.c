/*
 * rdma_hello.c: a first RDMA program, written for docs/tutorial-c.md.
 *
 * Two processes connect one RC queue pair each. Each side then, with
 * one-sided operations on the other's memory:
 *   1. RDMA WRITEs a greeting into the peer's inbox,
 *   2. RDMA READs the peer's inbox back and compares it with what it wrote,
 *   3. FETCH_AND_ADDs 1 to the peer's 64-bit counter (which starts at 100).
 * After a "done" byte each way, each side checks its own memory: the peer's
 * greeting in the inbox, the counter at 101. Exit status 0 only if every
 * check passed.
 *
 * Build:  cc rdma_hello.c -o rdma_hello -libverbs
 * Run:    ./rdma_hello                 (server: waits for one client)
 *         ./rdma_hello SERVER [PORT]   (client; PORT defaults to 7471)
 * The connection details (QP number, PSN, GID, rkey, address) go over TCP.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define GID_INDEX 1 /* the IPv4 address, as a RoCE v2 GID */
#define MSG_LEN 64

/* The memory both sides register; the peer writes, reads and adds here. */
struct region {
	char inbox[MSG_LEN];    /* the peer RDMA WRITEs its greeting here */
	char outbox[MSG_LEN];   /* our greeting, the source of our WRITE */
	char readback[MSG_LEN]; /* where our READ of the peer's inbox lands */
	uint64_t counter;       /* the peer adds 1 to it */
	uint64_t fetched;       /* our FETCH_AND_ADD returns the old value here */
};

/* What the two sides tell each other over TCP, in network byte order. */
struct conn_info {
	uint16_t lid;
	uint32_t qpn, psn, rkey;
	uint64_t addr;
	uint8_t gid[16];
} __attribute__((packed));

static int failures;

static void check(int ok, const char *what)
{
	printf("%-6s %s\n", ok ? "ok" : "FAILED", what);
	if (!ok)
		failures++;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* TCP: the server accepts one client; the client connects. */
static int tcp_connect(const char *host, const char *port)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
	int err = getaddrinfo(host, port, &hints, &ai);
	if (err) {
		fprintf(stderr, "getaddrinfo: %s\n", gai_strerror(err));
		exit(1);
	}
	int fd = socket(ai->ai_family, ai->ai_socktype, 0);
	if (fd < 0)
		die("socket");
	if (host) {
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0)
			die("connect");
	} else {
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 1) < 0)
			die("bind/listen");
		printf("waiting for a client on TCP port %s\n", port);
		fflush(stdout);
		int c = accept(fd, NULL, NULL);
		if (c < 0)
			die("accept");
		close(fd);
		fd = c;
	}
	freeaddrinfo(ai);
	return fd;
}

/* Sends ours and receives theirs (both sides write first: the kernel's
 * socket buffer holds our few bytes). */
static void tcp_exchange(int fd, const void *mine, void *theirs, size_t n)
{
	if (write(fd, mine, n) != (ssize_t)n)
		die("write");
	for (size_t got = 0; got < n;) {
		ssize_t r = read(fd, (char *)theirs + got, n - got);
		if (r <= 0)
			die("read (peer gone?)");
		got += r;
	}
}

/* Posts one signaled work request and waits for its completion. */
static int post_and_wait(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	struct ibv_wc wc;
	int n;
	wr->send_flags = IBV_SEND_SIGNALED;
	if ((errno = ibv_post_send(qp, wr, &bad)))
		die("ibv_post_send");
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		; /* busy-poll: a real program would use a completion channel */
	if (n < 0)
		die("ibv_poll_cq");
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "work request failed: %s\n", ibv_wc_status_str(wc.status));
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *server = argc > 1 ? argv[1] : NULL; /* NULL: we are the server */
	const char *port = argc > 2 ? argv[2] : "7471";

	/* 1. Open the first RDMA device. */
	int num;
	struct ibv_device **devs = ibv_get_device_list(&num);
	if (!devs || num == 0) {
		fprintf(stderr, "no RDMA device found\n");
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(devs[0]);
	if (!ctx)
		die("ibv_open_device");
	printf("device %s\n", ibv_get_device_name(devs[0]));

	/* 2. A protection domain, the registered memory, a completion queue. */
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd");
	struct region *buf;
	if (posix_memalign((void **)&buf, 4096, sizeof *buf))
		die("posix_memalign");
	memset(buf, 0, sizeof *buf);
	buf->counter = 100;
	snprintf(buf->outbox, MSG_LEN, "hello from the %s", server ? "client" : "server");
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof *buf,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	if (!mr)
		die("ibv_reg_mr");
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!cq)
		die("ibv_create_cq");

	/* 3. A reliable-connected queue pair. */
	struct ibv_qp_init_attr qia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 4, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &qia);
	if (!qp)
		die("ibv_create_qp");

	/* 4. Tell the peer who we are; learn who it is. */
	struct ibv_port_attr port_attr;
	union ibv_gid gid;
	if (ibv_query_port(ctx, 1, &port_attr) || ibv_query_gid(ctx, 1, GID_INDEX, &gid))
		die("ibv_query_port/gid");
	srand48(getpid());
	struct conn_info me = {
		.lid = htons(port_attr.lid), .qpn = htonl(qp->qp_num), .psn = htonl(lrand48() & 0xffffff),
		.rkey = htonl(mr->rkey), .addr = htobe64((uintptr_t)buf),
	}, peer;
	memcpy(me.gid, gid.raw, 16);
	int fd = tcp_connect(server, port);
	tcp_exchange(fd, &me, &peer, sizeof me);
	char gidstr[INET6_ADDRSTRLEN];
	inet_ntop(AF_INET6, me.gid, gidstr, sizeof gidstr);
	printf("local:  QPN 0x%06x PSN 0x%06x GID %s\n", ntohl(me.qpn), ntohl(me.psn), gidstr);
	inet_ntop(AF_INET6, peer.gid, gidstr, sizeof gidstr);
	printf("remote: QPN 0x%06x PSN 0x%06x GID %s\n", ntohl(peer.qpn), ntohl(peer.psn), gidstr);

	/* 5. RESET -> INIT -> RTR (ready to receive) -> RTS (ready to send). */
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
	};
	if ((errno = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
		die("modify QP to INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = port_attr.active_mtu;
	a.dest_qp_num = ntohl(peer.qpn);
	a.rq_psn = ntohl(peer.psn);
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.dlid = ntohs(peer.lid);
	a.ah_attr.port_num = 1;
	a.ah_attr.is_global = 1; /* RoCE: every packet carries the GIDs (IP addresses) */
	memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
	a.ah_attr.grh.sgid_index = GID_INDEX;
	a.ah_attr.grh.hop_limit = 1;
	if ((errno = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
		die("modify QP to RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = ntohl(me.psn);
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if ((errno = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)))
		die("modify QP to RTS");

	/* 6. One-sided operations on the peer's region. */
	uint64_t raddr = be64toh(peer.addr);
	uint32_t rkey = ntohl(peer.rkey);
	struct ibv_sge sge = {.lkey = mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1};

	sge.addr = (uintptr_t)buf->outbox; /* WRITE our outbox into its inbox */
	sge.length = MSG_LEN;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = raddr + offsetof(struct region, inbox);
	wr.wr.rdma.rkey = rkey;
	check(post_and_wait(qp, cq, &wr) == 0, "RDMA WRITE of our greeting completed");

	sge.addr = (uintptr_t)buf->readback; /* READ its inbox back */
	wr.opcode = IBV_WR_RDMA_READ;
	check(post_and_wait(qp, cq, &wr) == 0 && memcmp(buf->readback, buf->outbox, MSG_LEN) == 0,
	      "RDMA READ returned what we wrote");

	sge.addr = (uintptr_t)&buf->fetched; /* add 1 to its counter */
	sge.length = sizeof buf->fetched;
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	wr.wr.atomic.remote_addr = raddr + offsetof(struct region, counter);
	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.compare_add = 1;
	check(post_and_wait(qp, cq, &wr) == 0 && buf->fetched == 100, "FETCH_AND_ADD returned the old value 100");

	/* 7. Wait until the peer is done with our memory, then look at it. */
	char done = 'd', peer_done;
	tcp_exchange(fd, &done, &peer_done, 1);
	const char *want = server ? "hello from the server" : "hello from the client";
	printf("inbox:  \"%.*s\"\n", MSG_LEN, buf->inbox);
	check(strcmp(buf->inbox, want) == 0, "our inbox holds the peer's greeting");
	check(buf->counter == 101, "our counter is 101");

	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(devs);
	free(buf);
	close(fd);
	if (failures) {
		printf("rdma_hello: %d checks FAILED\n", failures);
		return 1;
	}
	printf("rdma_hello: all checks passed\n");
	return 0;
}
