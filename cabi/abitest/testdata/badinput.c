/*
 * badinput.c: bad-input and failure conformance for libibverbs.
 *
 * Every verb is given wrong arguments and the program prints one line per
 * case:
 *
 *	CASE <name> got=<what came back> want=<what rdma-core 44 over
 *	rdma_rxe (Linux 6.1) returns> ok|FAIL
 *
 * and exits non-zero when any case failed. docs/cabi-errors.md is the
 * table the expected values come from (with the source of each); where
 * rdma-core itself would crash (a NULL object it dereferences) the table
 * asks for EINVAL instead, and where rxe departs from the specification
 * the table says which one this program expects and why.
 *
 *	badinput -s [-p PORT]            the peer: serves sessions over TCP
 *	badinput [-p PORT] [PEER-ADDR]   the cases; the remote ones (remote
 *	                                 access, receive errors, peer death)
 *	                                 need the peer's address
 *
 * Compiled against the system's rdma-core headers (cc badinput.c
 * -libverbs); it runs over any libibverbs, tbrdma's or rdma-core's.
 * Written for tbrdma; no rdma-core code is copied.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define PG 4096
#define DEFAULT_PORT 18600

static int nfail, ncase;
static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_device_attr dattr;
static struct ibv_port_attr pattr;
static union ibv_gid gid;
static int gidx = -1;

/* ---------------------------------------------------------------- output */

static const char *en(int e)
{
	static char buf[8][24];
	static int k;
	switch (e) {
	case 0: return "0";
	case EINVAL: return "EINVAL";
	case ENOMEM: return "ENOMEM";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EFAULT: return "EFAULT";
	case EBUSY: return "EBUSY";
	case ENODATA: return "ENODATA";
	case EPERM: return "EPERM";
	case ENODEV: return "ENODEV";
	case ENOENT: return "ENOENT";
	case EAGAIN: return "EAGAIN";
	case ENOSYS: return "ENOSYS";
	}
	k = (k + 1) % 8;
	snprintf(buf[k], sizeof buf[k], "errno%d", e);
	return buf[k];
}

static const char *ws(int st)
{
	static const char *const n[] = {
		"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR", "WR_FLUSH_ERR",
		"MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR", "REM_ACCESS_ERR", "REM_OP_ERR",
		"RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR", "REM_ABORT_ERR",
		"INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR", "GENERAL_ERR",
	};
	static char buf[8][24];
	static int k;
	if (st >= 0 && st < (int)(sizeof n / sizeof n[0]))
		return n[st];
	k = (k + 1) % 8;
	snprintf(buf[k], sizeof buf[k], "status%d", st);
	return buf[k];
}

static const char *qs(int s)
{
	static const char *const n[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
	return s >= 0 && s <= 6 ? n[s] : "state?";
}

static void report(const char *name, const char *got, const char *want)
{
	int ok = strcmp(got, want) == 0;
	ncase++;
	if (!ok)
		nfail++;
	printf("CASE %s got=%s want=%s %s\n", name, got, want, ok ? "ok" : "FAIL");
	fflush(stdout);
}

/* A known difference from rxe that the library keeps on purpose (see
 * docs/cabi-errors.md): shown, not counted as a failure. */
static int nknown;
static void known(const char *name, const char *got, const char *want)
{
	int ok = strcmp(got, want) == 0;
	ncase++;
	if (!ok)
		nknown++;
	printf("CASE %s got=%s want=%s %s\n", name, got, want, ok ? "ok" : "KNOWN-DEVIATION");
	fflush(stdout);
}

/* A verb returning an errno (0 for success). */
static void ret_case(const char *name, int r, const char *want) { report(name, en(r), want); }

/* A verb returning an object or NULL and errno: got is 0 or the errno. */
static const char *ptr_got(const void *p, int err) { return p ? "0" : en(err); }

static void note(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("# ");
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
	va_end(ap);
}

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("SETUP-FAILED: ");
	vprintf(fmt, ap);
	printf(" (errno %s)\n", en(errno));
	fflush(stdout);
	va_end(ap);
	exit(2);
}

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ----------------------------------------------------- memory with guards */

/* A mapping of n read-write pages between two PROT_NONE pages; the whole
 * read-write part is filled with fill. */
static uint8_t *guarded(int n, int fill)
{
	uint8_t *m = mmap(NULL, (size_t)(n + 2) * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		die("mmap");
	if (mprotect(m, PG, PROT_NONE) || mprotect(m + (size_t)(n + 1) * PG, PG, PROT_NONE))
		die("mprotect");
	memset(m + PG, fill, (size_t)n * PG);
	return m + PG;
}

/* How many bytes of [p, p+n) are not fill. */
static int changed(const uint8_t *p, size_t n, int fill)
{
	int k = 0;
	for (size_t i = 0; i < n; i++)
		k += p[i] != (uint8_t)fill;
	return k;
}

/* ------------------------------------------------------------ verbs help */

static int qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	memset(&a, 0, sizeof a);
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return -1;
	return a.qp_state;
}

static struct ibv_qp *mkqp(struct ibv_cq *cq, enum ibv_qp_type type, int wr, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof ia);
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.srq = srq;
	ia.qp_type = type;
	ia.cap.max_send_wr = wr;
	ia.cap.max_recv_wr = srq ? 0 : wr;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.cap.max_inline_data = 64;
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		die("ibv_create_qp");
	return qp;
}

static int to_init(struct ibv_qp *qp, int access)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	if (qp->qp_type == IBV_QPT_UD) {
		a.qkey = 0x11111111;
		return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	}
	a.qp_access_flags = access;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static const int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
static const int rts_mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			    IBV_QP_MAX_QP_RD_ATOMIC;

static void rtr_attr(struct ibv_qp_attr *a, uint32_t dqpn, uint32_t rpsn, const union ibv_gid *dgid)
{
	memset(a, 0, sizeof *a);
	a->qp_state = IBV_QPS_RTR;
	a->path_mtu = pattr.active_mtu;
	a->dest_qp_num = dqpn;
	a->rq_psn = rpsn;
	a->max_dest_rd_atomic = 4;
	a->min_rnr_timer = 12;
	a->ah_attr.is_global = 1;
	a->ah_attr.grh.dgid = *dgid;
	a->ah_attr.grh.sgid_index = gidx;
	a->ah_attr.grh.hop_limit = 64;
	a->ah_attr.port_num = 1;
}

static void rts_attr(struct ibv_qp_attr *a, uint32_t spsn, int timeout, int retry)
{
	memset(a, 0, sizeof *a);
	a->qp_state = IBV_QPS_RTS;
	a->timeout = timeout;
	a->retry_cnt = retry;
	a->rnr_retry = 7;
	a->sq_psn = spsn;
	a->max_rd_atomic = 4;
}

static int connect_qp(struct ibv_qp *qp, int access, uint32_t dqpn, uint32_t rpsn, const union ibv_gid *dgid,
		      uint32_t spsn, int timeout, int retry)
{
	struct ibv_qp_attr a;
	if (to_init(qp, access))
		return -1;
	rtr_attr(&a, dqpn, rpsn, dgid);
	if (ibv_modify_qp(qp, &a, rtr_mask))
		return -2;
	rts_attr(&a, spsn, timeout, retry);
	if (ibv_modify_qp(qp, &a, rts_mask))
		return -3;
	return 0;
}

/* Waits up to ms for one completion on cq; 1 when one came. */
static int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
	long long end = now_ms() + ms;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n > 0)
			return 1;
		if (n < 0 || now_ms() > end)
			return 0;
		usleep(200);
	}
}

/* Waits for the completion of wr_id (others are skipped) and returns its
 * status name, or "none" after ms. */
static const char *wc_of(struct ibv_cq *cq, uint64_t wr_id, int ms)
{
	struct ibv_wc wc;
	long long end = now_ms() + ms;
	while (now_ms() <= end) {
		if (!wait_wc(cq, &wc, (int)(end - now_ms()) + 1))
			break;
		if (wc.wr_id == wr_id)
			return ws(wc.status);
	}
	return "none";
}

static int post_write(struct ibv_qp *qp, uint64_t id, void *laddr, uint32_t len, uint32_t lkey, uint64_t raddr,
		      uint32_t rkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)laddr, .length = len, .lkey = lkey};
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = id;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

static int post_op(struct ibv_qp *qp, uint64_t id, enum ibv_wr_opcode op, void *laddr, uint32_t len, uint32_t lkey,
		   uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)laddr, .length = len, .lkey = lkey};
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = id;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 1;
		wr.wr.atomic.swap = 2;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	return ibv_post_send(qp, &wr, &bad);
}

static int post_recv1(struct ibv_qp *qp, uint64_t id, void *addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
	struct ibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ibv_post_recv(qp, &wr, &bad);
}

static void gid_hex(const union ibv_gid *g, char *out)
{
	for (int i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", g->raw[i]);
}

static int hex_gid(const char *s, union ibv_gid *g)
{
	if (strlen(s) != 32)
		return -1;
	for (int i = 0; i < 16; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		g->raw[i] = (uint8_t)v;
	}
	return 0;
}

/* Opens the first device and picks the RoCE v2 GID of an IPv4 address (the
 * first IPv4-mapped one when the type cannot be told). */
static void open_dev(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l || n == 0)
		die("no RDMA device");
	ctx = ibv_open_device(l[0]);
	if (!ctx)
		die("ibv_open_device %s", ibv_get_device_name(l[0]));
	ibv_free_device_list(l);
	if (ibv_query_device(ctx, &dattr))
		die("ibv_query_device");
	if (ibv_query_port(ctx, 1, &pattr))
		die("ibv_query_port");
	int fallback = -1;
	for (int i = 0; i < pattr.gid_tbl_len && i < 256; i++) {
		union ibv_gid g;
		if (ibv_query_gid(ctx, 1, i, &g))
			continue;
		static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		if (memcmp(g.raw, v4, 12))
			continue;
		struct ibv_gid_entry e;
		if (ibv_query_gid_ex(ctx, 1, i, &e, 0) == 0 && e.gid_type == IBV_GID_TYPE_ROCE_V2) {
			gidx = i;
			gid = g;
			break;
		}
		if (fallback < 0) {
			fallback = i;
			gid = g;
		}
	}
	if (gidx < 0)
		gidx = fallback;
	if (gidx < 0)
		die("no IPv4 GID");
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd");
}

/* ------------------------------------------------------------ TCP lines */

static int sendline(int fd, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
	va_end(ap);
	buf[n++] = '\n';
	return write(fd, buf, n) == n ? 0 : -1;
}

/* Reads one line (without the newline); 0 on EOF or error, else its length.
 * Waits up to ms. */
static int readline(int fd, char *buf, int size, int ms)
{
	int n = 0;
	long long end = now_ms() + ms;
	while (n < size - 1) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int left = (int)(end - now_ms());
		if (left <= 0 || poll(&p, 1, left) <= 0)
			return 0;
		ssize_t r = read(fd, buf + n, 1);
		if (r <= 0)
			return 0;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = 0;
	return n ? n : 1;
}

/* ================================================================ peer */

/*
 * A session: the client sends
 *	S <qp_access> <recvlen> <badlkey> <qpn> <psn> <gid>
 * the peer makes an RC QP with that access, two MRs in guarded memory —
 * rw (4096 bytes, local write and every remote right, filled 0x11) and ro
 * (1024 bytes, REMOTE_READ only, filled 0x22) — posts two receives of
 * recvlen bytes into a third region filled 0x33 (the first with a wrong
 * lkey when badlkey), connects and answers
 *	R <qpn> <psn> <gid> <rw_addr> <rw_rkey> <rw_len> <ro_addr> <ro_rkey> <ro_len>
 * Then "C <n>" waits up to 3 s for n completions and answers
 *	K <qp_state> <canary ok|bad> <bytes of rw changed> <n> <status>...
 * "D" kills the peer (peer death), "E" ends the session.
 */
static void serve_session(int fd, char *line)
{
	int access, recvlen, badlkey;
	unsigned qpn, psn;
	char gh[64];
	union ibv_gid dgid;
	if (sscanf(line, "S %d %d %d %u %u %63s", &access, &recvlen, &badlkey, &qpn, &psn, gh) != 6 ||
	    hex_gid(gh, &dgid) || recvlen < 0 || recvlen > 2048) {
		sendline(fd, "X bad request");
		return;
	}
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!cq)
		die("peer create cq");
	struct ibv_qp *qp = mkqp(cq, IBV_QPT_RC, 16, NULL);
	uint8_t *m = guarded(4, 0);
	uint8_t *rw = m + 512, *ro = m + 2 * PG + 256, *rv = m + 3 * PG;
	memset(m, 0xa5, 4 * PG);
	memset(rw, 0x11, 4096);
	memset(ro, 0x22, 1024);
	memset(rv, 0x33, 4096);
	struct ibv_mr *rwmr = ibv_reg_mr(pd, rw, 4096,
					 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
						 IBV_ACCESS_REMOTE_ATOMIC);
	struct ibv_mr *romr = ibv_reg_mr(pd, ro, 1024, IBV_ACCESS_REMOTE_READ);
	struct ibv_mr *rvmr = ibv_reg_mr(pd, rv, 4096, IBV_ACCESS_LOCAL_WRITE);
	if (!rwmr || !romr || !rvmr)
		die("peer reg mr");
	if (to_init(qp, access))
		die("peer init");
	if (post_recv1(qp, 1, rv, recvlen, badlkey ? rvmr->lkey ^ 0x5a5a5a00 : rvmr->lkey) ||
	    post_recv1(qp, 2, rv + 2048, recvlen, rvmr->lkey))
		die("peer post recv");
	struct ibv_qp_attr a;
	rtr_attr(&a, qpn, psn, &dgid);
	if (ibv_modify_qp(qp, &a, rtr_mask))
		die("peer rtr");
	uint32_t mypsn = 0x1000 + (qp->qp_num & 0xfff);
	rts_attr(&a, mypsn, 14, 7);
	if (ibv_modify_qp(qp, &a, rts_mask))
		die("peer rts");
	char mygh[64];
	gid_hex(&gid, mygh);
	sendline(fd, "R %u %u %s %llu %u %u %llu %u %u", qp->qp_num, mypsn, mygh, (unsigned long long)(uintptr_t)rw,
		 rwmr->rkey, 4096, (unsigned long long)(uintptr_t)ro, romr->rkey, 1024);
	char cmd[128];
	while (readline(fd, cmd, sizeof cmd, 60000)) {
		int want;
		if (cmd[0] == 'D') {
			/* Peer death: no goodbye, no teardown. */
			kill(getpid(), SIGKILL);
		} else if (sscanf(cmd, "C %d", &want) == 1) {
			int st[8], n = 0;
			long long end = now_ms() + 3000;
			while (n < want && n < 8 && now_ms() < end) {
				struct ibv_wc wc;
				if (wait_wc(cq, &wc, 50))
					st[n++] = wc.status;
			}
			/* Then a little longer, so that unexpected extra
			 * completions show. */
			long long end2 = now_ms() + 100;
			while (n < 8 && now_ms() < end2) {
				struct ibv_wc wc;
				if (wait_wc(cq, &wc, 20))
					st[n++] = wc.status;
			}
			int canary = changed(m, 512, 0xa5) == 0 && changed(rw + 4096, 2 * PG - 512 - 4096, 0xa5) == 0 &&
				     changed(m + 2 * PG, 256, 0xa5) == 0 &&
				     changed(ro + 1024, PG - 256 - 1024, 0xa5) == 0 && changed(ro, 1024, 0x22) == 0 &&
				     changed(rv + recvlen, 2048 - recvlen, 0x33) == 0 &&
				     changed(rv + 2048 + recvlen, 2048 - recvlen, 0x33) == 0;
			char out[256];
			int o = snprintf(out, sizeof out, "K %d %s %d %d", qp_state(qp), canary ? "ok" : "bad",
					 changed(rw, 4096, 0x11), n);
			for (int i = 0; i < n; i++)
				o += snprintf(out + o, sizeof out - o, " %d", st[i]);
			sendline(fd, "%s", out);
		} else {
			break;
		}
	}
	ibv_destroy_qp(qp);
	ibv_dereg_mr(rwmr);
	ibv_dereg_mr(romr);
	ibv_dereg_mr(rvmr);
	ibv_destroy_cq(cq);
	munmap(m - PG, 6 * PG);
}

static int serve(int port)
{
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	if (bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 4))
		die("listen on %d", port);
	printf("ready on port %d\n", port);
	fflush(stdout);
	for (;;) {
		int fd = accept(ls, NULL, NULL);
		if (fd < 0)
			continue;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		char line[256];
		while (readline(fd, line, sizeof line, 60000)) {
			if (line[0] == 'S')
				serve_session(fd, line);
			else if (line[0] == 'Q') {
				close(fd);
				return 0;
			}
		}
		close(fd);
	}
}

/* ================================================================ local */

static void null_cases(void)
{
	/* rdma-core dereferences these; tbrdma answers EINVAL. */
	errno = 0;
	struct ibv_pd *p = ibv_alloc_pd(NULL);
	report("null_ctx_alloc_pd", ptr_got(p, errno), "EINVAL");
	errno = 0;
	struct ibv_cq *c = ibv_create_cq(NULL, 4, NULL, NULL, 0);
	report("null_ctx_create_cq", ptr_got(c, errno), "EINVAL");
	errno = 0;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(NULL);
	report("null_ctx_create_comp_channel", ptr_got(ch, errno), "EINVAL");
	errno = 0;
	struct ibv_context *cx = ibv_open_device(NULL);
	report("null_open_device", ptr_got(cx, errno), "EINVAL");
	ret_case("null_query_device_attr", ibv_query_device(ctx, NULL), "EINVAL");
	ret_case("null_dealloc_pd", ibv_dealloc_pd(NULL), "EINVAL");
	ret_case("null_destroy_cq", ibv_destroy_cq(NULL), "EINVAL");
	ret_case("null_destroy_qp", ibv_destroy_qp(NULL), "EINVAL");
	ret_case("null_dereg_mr", ibv_dereg_mr(NULL), "EINVAL");
	ret_case("null_destroy_comp_channel", ibv_destroy_comp_channel(NULL), "EINVAL");
	errno = 0;
	uint8_t buf[64];
	struct ibv_mr *mr = ibv_reg_mr(NULL, buf, sizeof buf, 0);
	report("null_pd_reg_mr", ptr_got(mr, errno), "EINVAL");

	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	if (!cq)
		die("create cq");
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof ia);
	ia.send_cq = ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	errno = 0;
	struct ibv_qp *qp = ibv_create_qp(NULL, &ia);
	report("null_pd_create_qp", ptr_got(qp, errno), "EINVAL");
	errno = 0;
	qp = ibv_create_qp(pd, NULL);
	report("null_attr_create_qp", ptr_got(qp, errno), "EINVAL");
	ia.send_cq = NULL;
	errno = 0;
	qp = ibv_create_qp(pd, &ia);
	report("create_qp_no_send_cq", ptr_got(qp, errno), "EINVAL");
	if (qp)
		ibv_destroy_qp(qp);
	ia.send_cq = cq;
	ia.recv_cq = NULL;
	errno = 0;
	qp = ibv_create_qp(pd, &ia);
	report("create_qp_no_recv_cq", ptr_got(qp, errno), "EINVAL");
	if (qp)
		ibv_destroy_qp(qp);
	errno = 0;
	struct ibv_ah *ah = ibv_create_ah(pd, NULL);
	report("null_attr_create_ah", ptr_got(ah, errno), "EINVAL");

	qp = mkqp(cq, IBV_QPT_RC, 2, NULL);
	ret_case("null_attr_modify_qp", ibv_modify_qp(qp, NULL, IBV_QP_STATE), "EINVAL");
	struct ibv_qp_attr a;
	ret_case("null_attr_query_qp", ibv_query_qp(qp, NULL, IBV_QP_STATE, &ia), "EINVAL");
	ret_case("null_init_attr_query_qp", ibv_query_qp(qp, &a, IBV_QP_STATE, NULL), "EINVAL");
	if (to_init(qp, 0))
		die("init");
	/* Post with no work request, or no bad_wr: rxe's provider refuses
	 * both (EINVAL) before queueing anything. */
	struct ibv_send_wr *sbad = NULL;
	struct ibv_recv_wr *rbad = NULL;
	ret_case("post_send_null_wr", ibv_post_send(qp, NULL, &sbad), "EINVAL");
	ret_case("post_recv_null_wr", ibv_post_recv(qp, NULL, &rbad), "EINVAL");
	struct ibv_recv_wr rwr;
	memset(&rwr, 0, sizeof rwr);
	rwr.wr_id = 7;
	ret_case("post_recv_null_bad_wr", ibv_post_recv(qp, &rwr, NULL), "EINVAL");
	/* num_sge > 0 with no list: rdma-core reads through it (crash). */
	rwr.num_sge = 1;
	ret_case("post_recv_null_sg_list", ibv_post_recv(qp, &rwr, &rbad), "EINVAL");
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
}

static void cq_cases(void)
{
	errno = 0;
	struct ibv_cq *c = ibv_create_cq(ctx, 0, NULL, NULL, 0);
	report("create_cq_cqe_0", ptr_got(c, errno), "EINVAL");
	errno = 0;
	c = ibv_create_cq(ctx, -1, NULL, NULL, 0);
	report("create_cq_cqe_minus1", ptr_got(c, errno), "EINVAL");
	errno = 0;
	c = ibv_create_cq(ctx, dattr.max_cqe + 1, NULL, NULL, 0);
	report("create_cq_cqe_over_max", ptr_got(c, errno), "EINVAL");
	if (c)
		ibv_destroy_cq(c);
	errno = 0;
	c = ibv_create_cq(ctx, 4, NULL, NULL, ctx->num_comp_vectors);
	report("create_cq_comp_vector_num", ptr_got(c, errno), "EINVAL");
	if (c)
		ibv_destroy_cq(c);
	errno = 0;
	c = ibv_create_cq(ctx, 4, NULL, NULL, -1);
	report("create_cq_comp_vector_minus1", ptr_got(c, errno), "EINVAL");
	if (c)
		ibv_destroy_cq(c);
	/* Arming a CQ that has no channel: the kernel arms it (0). */
	c = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	if (!c)
		die("create cq");
	ret_case("req_notify_cq_no_channel", ibv_req_notify_cq(c, 0), "0");
	ibv_destroy_cq(c);
}

static void create_qp_cases(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	if (!cq)
		die("create cq");
	struct {
		const char *name;
		int type, swr, rwr, ssge, rsge, inl;
		const char *want;
	} cs[] = {
		{"create_qp_send_wr_over_max", IBV_QPT_RC, dattr.max_qp_wr + 1, 1, 1, 1, 0, "EINVAL"},
		{"create_qp_recv_wr_over_max", IBV_QPT_RC, 1, dattr.max_qp_wr + 1, 1, 1, 0, "EINVAL"},
		{"create_qp_send_sge_over_max", IBV_QPT_RC, 1, 1, dattr.max_sge + 1, 1, 0, "EINVAL"},
		{"create_qp_recv_sge_over_max", IBV_QPT_RC, 1, 1, 1, dattr.max_sge + 1, 0, "EINVAL"},
		{"create_qp_inline_over_max", IBV_QPT_RC, 1, 1, 1, 1, 1 << 20, "EINVAL"},
		/* As root (CAP_NET_RAW); without it uverbs says EPERM first. */
		{"create_qp_raw_packet", IBV_QPT_RAW_PACKET, 1, 1, 1, 1, 0, "EOPNOTSUPP"},
		{"create_qp_xrc_send", IBV_QPT_XRC_SEND, 1, 1, 1, 1, 0, "EOPNOTSUPP"},
		/* XRC_RECV without an XRC domain: libibverbs refuses it. */
		{"create_qp_xrc_recv", IBV_QPT_XRC_RECV, 1, 1, 1, 1, 0, "EINVAL"},
		{"create_qp_type_unknown", 77, 1, 1, 1, 1, 0, "EINVAL"},
	};
	for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
		struct ibv_qp_init_attr ia;
		memset(&ia, 0, sizeof ia);
		ia.send_cq = ia.recv_cq = cq;
		ia.qp_type = cs[i].type;
		ia.cap.max_send_wr = cs[i].swr;
		ia.cap.max_recv_wr = cs[i].rwr;
		ia.cap.max_send_sge = cs[i].ssge;
		ia.cap.max_recv_sge = cs[i].rsge;
		ia.cap.max_inline_data = cs[i].inl;
		errno = 0;
		struct ibv_qp *qp = ibv_create_qp(pd, &ia);
		report(cs[i].name, ptr_got(qp, errno), cs[i].want);
		if (qp)
			ibv_destroy_qp(qp);
	}
	ibv_destroy_cq(cq);
}

static void srq_ah_cases(void)
{
	struct ibv_srq_init_attr sa;
	memset(&sa, 0, sizeof sa);
	sa.attr.max_wr = 0;
	sa.attr.max_sge = 1;
	errno = 0;
	struct ibv_srq *s = ibv_create_srq(pd, &sa);
	report("create_srq_max_wr_0", ptr_got(s, errno), "EINVAL");
	if (s)
		ibv_destroy_srq(s);
	sa.attr.max_wr = dattr.max_srq_wr + 1;
	errno = 0;
	s = ibv_create_srq(pd, &sa);
	report("create_srq_max_wr_over_max", ptr_got(s, errno), "EINVAL");
	if (s)
		ibv_destroy_srq(s);
	sa.attr.max_wr = 4;
	sa.attr.max_sge = dattr.max_srq_sge + 1;
	errno = 0;
	s = ibv_create_srq(pd, &sa);
	report("create_srq_max_sge_over_max", ptr_got(s, errno), "EINVAL");
	if (s)
		ibv_destroy_srq(s);

	struct ibv_ah_attr aa;
	memset(&aa, 0, sizeof aa);
	aa.port_num = 1;
	aa.is_global = 0;
	errno = 0;
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	report("create_ah_no_grh", ptr_got(ah, errno), "EINVAL");
	if (ah)
		ibv_destroy_ah(ah);
	aa.is_global = 1;
	aa.grh.dgid = gid;
	aa.grh.hop_limit = 64;
	aa.grh.sgid_index = 200;
	errno = 0;
	ah = ibv_create_ah(pd, &aa);
	report("create_ah_empty_sgid_index", ptr_got(ah, errno), "ENODATA");
	if (ah)
		ibv_destroy_ah(ah);
	aa.grh.sgid_index = gidx;
	aa.port_num = 0;
	errno = 0;
	ah = ibv_create_ah(pd, &aa);
	report("create_ah_port_0", ptr_got(ah, errno), "EINVAL");
	if (ah)
		ibv_destroy_ah(ah);
}

static void modify_qp_cases(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_qp *qp = mkqp(cq, IBV_QPT_RC, 2, NULL);
	struct ibv_qp *peer = mkqp(cq, IBV_QPT_RC, 2, NULL);
	struct ibv_qp_attr a;
	const int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;

	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	ret_case("modify_reset_to_rts", ibv_modify_qp(qp, &a, IBV_QP_STATE), "EINVAL");
	a.qp_state = IBV_QPS_RTR;
	ret_case("modify_reset_to_rtr", ibv_modify_qp(qp, &a, IBV_QP_STATE), "EINVAL");
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	ret_case("modify_init_no_pkey_index", ibv_modify_qp(qp, &a, init_mask & ~IBV_QP_PKEY_INDEX), "EINVAL");
	ret_case("modify_init_no_port", ibv_modify_qp(qp, &a, init_mask & ~IBV_QP_PORT), "EINVAL");
	ret_case("modify_init_no_access_flags", ibv_modify_qp(qp, &a, init_mask & ~IBV_QP_ACCESS_FLAGS), "EINVAL");
	ret_case("modify_init_extra_sq_psn", ibv_modify_qp(qp, &a, init_mask | IBV_QP_SQ_PSN), "EINVAL");
	a.cur_qp_state = IBV_QPS_RESET;
	ret_case("modify_init_cur_state_in_reset", ibv_modify_qp(qp, &a, init_mask | IBV_QP_CUR_STATE), "EINVAL");
	/* Mask bits beyond IBV_QP_DEST_QPN: the kernel's uverbs refuses the
	 * undefined ones, libibverbs those from IBV_QP_RATE_LIMIT on. */
	ret_case("modify_mask_bit21", ibv_modify_qp(qp, &a, init_mask | (1 << 21)), "EOPNOTSUPP");
	ret_case("modify_mask_bit26", ibv_modify_qp(qp, &a, init_mask | (1 << 26)), "EOPNOTSUPP");
	ret_case("modify_mask_bit30", ibv_modify_qp(qp, &a, init_mask | (1 << 30)), "EOPNOTSUPP");
	a.port_num = 2;
	ret_case("modify_init_port_2", ibv_modify_qp(qp, &a, init_mask), "EINVAL");
	a.port_num = 1;
	a.qp_state = 9;
	ret_case("modify_state_9", ibv_modify_qp(qp, &a, IBV_QP_STATE), "EINVAL");
	report("modify_failed_left_reset", qs(qp_state(qp)), "RESET");
	if (qp_state(qp) != IBV_QPS_RESET) {
		ibv_destroy_qp(qp);
		qp = mkqp(cq, IBV_QPT_RC, 2, NULL);
	}

	if (to_init(qp, IBV_ACCESS_REMOTE_WRITE) || to_init(peer, 0))
		die("init");
	a.qp_state = IBV_QPS_RTS;
	ret_case("modify_init_to_rts", ibv_modify_qp(qp, &a, IBV_QP_STATE), "EINVAL");
	struct {
		const char *name;
		int drop;
	} rtr[] = {
		{"modify_rtr_no_av", IBV_QP_AV},
		{"modify_rtr_no_path_mtu", IBV_QP_PATH_MTU},
		{"modify_rtr_no_dest_qpn", IBV_QP_DEST_QPN},
		{"modify_rtr_no_rq_psn", IBV_QP_RQ_PSN},
		{"modify_rtr_no_max_dest_rd_atomic", IBV_QP_MAX_DEST_RD_ATOMIC},
		{"modify_rtr_no_min_rnr_timer", IBV_QP_MIN_RNR_TIMER},
	};
	for (size_t i = 0; i < sizeof rtr / sizeof rtr[0]; i++) {
		rtr_attr(&a, peer->qp_num, 0, &gid);
		ret_case(rtr[i].name, ibv_modify_qp(qp, &a, rtr_mask & ~rtr[i].drop), "EINVAL");
	}
	rtr_attr(&a, peer->qp_num, 0, &gid);
	a.ah_attr.is_global = 0;
	ret_case("modify_rtr_av_no_grh", ibv_modify_qp(qp, &a, rtr_mask), "EINVAL");
	rtr_attr(&a, peer->qp_num, 0, &gid);
	a.ah_attr.grh.sgid_index = 200;
	ret_case("modify_rtr_av_empty_sgid_index", ibv_modify_qp(qp, &a, rtr_mask), "ENODATA");
	rtr_attr(&a, peer->qp_num, 0, &gid);
	a.ah_attr.port_num = 0;
	ret_case("modify_rtr_av_port_0", ibv_modify_qp(qp, &a, rtr_mask), "EINVAL");
	rtr_attr(&a, peer->qp_num, 0, &gid);
	a.path_mtu = IBV_MTU_4096 + 1;
	ret_case("modify_rtr_path_mtu_6", ibv_modify_qp(qp, &a, rtr_mask), "EINVAL");
	rtr_attr(&a, peer->qp_num, 0, &gid);
	a.max_dest_rd_atomic = dattr.max_qp_rd_atom + 1;
	int rd = ibv_modify_qp(qp, &a, rtr_mask);
	known("modify_rtr_max_dest_rd_atomic_over_max", en(rd), "0");
	if (rd == 0)
		die("the known case modify_rtr_max_dest_rd_atomic_over_max now succeeds: update badinput.c");
	report("modify_failed_left_init", qs(qp_state(qp)), "INIT");
	if (qp_state(qp) != IBV_QPS_INIT) {
		/* A refusal that did not happen: go on with a new QP. */
		ibv_destroy_qp(qp);
		qp = mkqp(cq, IBV_QPT_RC, 2, NULL);
		if (to_init(qp, IBV_ACCESS_REMOTE_WRITE))
			die("init");
	}
	rtr_attr(&a, peer->qp_num, 0, &gid);
	if (ibv_modify_qp(qp, &a, rtr_mask))
		die("rtr");
	struct {
		const char *name;
		int drop;
	} rts[] = {
		{"modify_rts_no_timeout", IBV_QP_TIMEOUT},
		{"modify_rts_no_retry_cnt", IBV_QP_RETRY_CNT},
		{"modify_rts_no_rnr_retry", IBV_QP_RNR_RETRY},
		{"modify_rts_no_sq_psn", IBV_QP_SQ_PSN},
		{"modify_rts_no_max_qp_rd_atomic", IBV_QP_MAX_QP_RD_ATOMIC},
	};
	for (size_t i = 0; i < sizeof rts / sizeof rts[0]; i++) {
		rts_attr(&a, 0, 14, 7);
		ret_case(rts[i].name, ibv_modify_qp(qp, &a, rts_mask & ~rts[i].drop), "EINVAL");
	}
	rts_attr(&a, 0, 32, 7);
	ret_case("modify_rts_timeout_32", ibv_modify_qp(qp, &a, rts_mask), "EINVAL");
	rts_attr(&a, 0, 14, 7);
	a.max_rd_atomic = dattr.max_qp_init_rd_atom + 1;
	ret_case("modify_rts_max_rd_atomic_over_max", ibv_modify_qp(qp, &a, rts_mask), "EINVAL");
	report("modify_failed_left_rtr", qs(qp_state(qp)), "RTR");
	if (qp_state(qp) != IBV_QPS_RTR) {
		ibv_destroy_qp(qp);
		qp = mkqp(cq, IBV_QPT_RC, 2, NULL);
		rtr_attr(&a, peer->qp_num, 0, &gid);
		if (to_init(qp, IBV_ACCESS_REMOTE_WRITE) || ibv_modify_qp(qp, &a, rtr_mask))
			die("rtr");
	}
	/* rxe checks neither: retry_cnt and rnr_retry are 3-bit fields, and
	 * max_dest_rd_atomic only sizes a table. tbrdma refuses values the
	 * wire cannot carry. (The QP stays in RTR when they are refused.) */
	rts_attr(&a, 0, 14, 8);
	int r8 = ibv_modify_qp(qp, &a, rts_mask);
	known("modify_rts_retry_cnt_8", en(r8), "0");
	if (r8 == 0)
		die("the known case modify_rts_retry_cnt_8 now succeeds: update badinput.c");
	/* Without IBV_QP_STATE: RTR has no transition to itself. */
	memset(&a, 0, sizeof a);
	a.min_rnr_timer = 12;
	ret_case("modify_rtr_min_rnr_timer_alone", ibv_modify_qp(qp, &a, IBV_QP_MIN_RNR_TIMER), "EINVAL");
	rts_attr(&a, 0, 14, 7);
	ret_case("modify_rts_ok", ibv_modify_qp(qp, &a, rts_mask), "0");
	/* RTS to RTS allows MIN_RNR_TIMER (libfabric's verbs provider sets it
	 * alone on every connected QP), not SQ_PSN. */
	memset(&a, 0, sizeof a);
	a.min_rnr_timer = 12;
	ret_case("modify_rts_min_rnr_timer_alone", ibv_modify_qp(qp, &a, IBV_QP_MIN_RNR_TIMER), "0");
	ret_case("modify_rts_sq_psn_alone", ibv_modify_qp(qp, &a, IBV_QP_SQ_PSN), "EINVAL");
	report("modify_alone_left_rts", qs(qp_state(qp)), "RTS");
	ibv_destroy_qp(qp);
	ibv_destroy_qp(peer);
	ibv_destroy_cq(cq);
}

/* Local memory of the client: 7 pages between guards; lmr is 4096 bytes at
 * page 0 + 512 (local write, remote read/write), big the last 4 pages. */
static uint8_t *lmem, *lbuf;
static struct ibv_mr *lmr, *bigmr;

/* A QP whose requests go nowhere: RTS toward a second QP left in INIT, so
 * its work requests stay outstanding (until the long timeout). */
struct sink {
	struct ibv_cq *cq;
	struct ibv_qp *qp, *dst;
};

static void mksink(struct sink *s, int wr)
{
	s->cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!s->cq)
		die("create cq");
	s->qp = mkqp(s->cq, IBV_QPT_RC, wr, NULL);
	s->dst = mkqp(s->cq, IBV_QPT_RC, 2, NULL);
	if (to_init(s->dst, 0) || connect_qp(s->qp, 0, s->dst->qp_num, 0, &gid, 0, 20, 7))
		die("sink connect");
}

static void rmsink(struct sink *s)
{
	ibv_destroy_qp(s->qp);
	ibv_destroy_qp(s->dst);
	ibv_destroy_cq(s->cq);
}

static void post_state_cases(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	struct ibv_qp *qp = mkqp(cq, IBV_QPT_RC, 4, NULL);
	struct ibv_qp *peer = mkqp(cq, IBV_QPT_RC, 4, NULL);
	ret_case("post_send_reset", post_write(qp, 1, lbuf, 8, lmr->lkey, 0, 0), "EINVAL");
	ret_case("post_recv_reset", post_recv1(qp, 2, lbuf, 8, lmr->lkey), "EINVAL");
	if (to_init(qp, 0) || to_init(peer, 0))
		die("init");
	ret_case("post_send_init", post_write(qp, 3, lbuf, 8, lmr->lkey, 0, 0), "EINVAL");
	ret_case("post_recv_init", post_recv1(qp, 4, lbuf, 8, lmr->lkey), "0");
	struct ibv_qp_attr a;
	rtr_attr(&a, peer->qp_num, 0, &gid);
	if (ibv_modify_qp(qp, &a, rtr_mask))
		die("rtr");
	ret_case("post_send_rtr", post_write(qp, 5, lbuf, 8, lmr->lkey, 0, 0), "EINVAL");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		die("err");
	report("post_recv_init_flushed_on_err", wc_of(cq, 4, 2000), "WR_FLUSH_ERR");
	ret_case("post_send_err", post_write(qp, 6, lbuf, 8, lmr->lkey, 0, 0), "0");
	report("post_send_err_flushed", wc_of(cq, 6, 2000), "WR_FLUSH_ERR");
	ret_case("post_recv_err", post_recv1(qp, 7, lbuf, 8, lmr->lkey), "0");
	report("post_recv_err_flushed", wc_of(cq, 7, 2000), "WR_FLUSH_ERR");
	ibv_destroy_qp(qp);
	ibv_destroy_qp(peer);
	ibv_destroy_cq(cq);
}

static void post_limit_cases(void)
{
	struct sink s;
	mksink(&s, 4);
	struct sink q; /* for the queue limits: nothing posted on it before */
	mksink(&q, 4);
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr qa;
	if (ibv_query_qp(s.qp, &qa, IBV_QP_CAP, &ia))
		die("query qp");
	uint32_t nsge = ia.cap.max_send_sge + 1;
	struct ibv_sge sg[64];
	for (uint32_t i = 0; i < nsge && i < 64; i++)
		sg[i] = (struct ibv_sge){.addr = (uintptr_t)lbuf, .length = 1, .lkey = lmr->lkey};
	struct ibv_send_wr w1, w2, *bad = NULL;
	memset(&w1, 0, sizeof w1);
	w1.wr_id = 1;
	w1.opcode = IBV_WR_RDMA_WRITE;
	w1.sg_list = sg;
	w1.num_sge = 1;
	w2 = w1;
	w2.wr_id = 2;
	w2.num_sge = nsge;
	w1.next = &w2;
	int r = ibv_post_send(s.qp, &w1, &bad);
	ret_case("post_send_too_many_sge", r, "EINVAL");
	report("post_send_too_many_sge_bad_wr", bad == &w2 ? "second" : bad == &w1 ? "first" : "other", "second");

	/* Inline data larger than max_inline_data. */
	uint32_t inl = ia.cap.max_inline_data + 1;
	struct ibv_sge isg = {.addr = (uintptr_t)lbuf, .length = inl, .lkey = lmr->lkey};
	memset(&w1, 0, sizeof w1);
	w1.opcode = IBV_WR_SEND;
	w1.send_flags = IBV_SEND_INLINE;
	w1.sg_list = &isg;
	w1.num_sge = 1;
	ret_case("post_send_inline_over_max", ibv_post_send(s.qp, &w1, &bad), "EINVAL");

	/* Atomics: remote address not 8-aligned, local buffer under 8 bytes. */
	ret_case("post_atomic_misaligned",
		 post_op(s.qp, 3, IBV_WR_ATOMIC_FETCH_AND_ADD, lbuf, 8, lmr->lkey, 0x1004, 1), "EINVAL");
	ret_case("post_atomic_short_sge",
		 post_op(s.qp, 3, IBV_WR_ATOMIC_FETCH_AND_ADD, lbuf, 4, lmr->lkey, 0x1000, 1), "EINVAL");
	struct ibv_sge one = {.addr = (uintptr_t)lbuf, .length = 8, .lkey = lmr->lkey};
	memset(&w1, 0, sizeof w1);
	w1.opcode = IBV_WR_RDMA_WRITE;
	w1.sg_list = &one;
	w1.num_sge = 1;
	w1.wr.rdma.remote_addr = 0x1000;
	w1.wr.rdma.rkey = 1;
	ret_case("post_send_null_bad_wr", ibv_post_send(s.qp, &w1, NULL), "EINVAL");
	/* Inline data need not be registered: the lkey is not looked at. */
	uint8_t stackbuf[16] = {1, 2, 3};
	struct ibv_sge ssg = {.addr = (uintptr_t)stackbuf, .length = sizeof stackbuf, .lkey = 0};
	memset(&w1, 0, sizeof w1);
	w1.opcode = IBV_WR_RDMA_WRITE;
	w1.send_flags = IBV_SEND_INLINE;
	w1.sg_list = &ssg;
	w1.num_sge = 1;
	w1.wr.rdma.remote_addr = 0x1000;
	w1.wr.rdma.rkey = 1;
	ret_case("post_send_inline_unregistered", ibv_post_send(s.qp, &w1, &bad), "0");
	/* rxe's provider checks only that an atomic's SGE holds at least 8
	 * bytes; tbrdma wants exactly one 8-byte SGE. */
	known("post_atomic_long_sge",
	      en(post_op(s.qp, 4, IBV_WR_ATOMIC_FETCH_AND_ADD, lbuf, 16, lmr->lkey, 0x1000, 1)), "0");

	/* The send queue holds max_send_wr outstanding requests; one more is
	 * ENOMEM. */
	int posted = 0, err = 0;
	for (uint32_t i = 0; i <= ia.cap.max_send_wr && !err; i++) {
		err = post_write(q.qp, 100 + i, lbuf, 8, lmr->lkey, 0x1000, 1);
		if (!err)
			posted++;
	}
	ret_case("post_send_queue_full", err, "ENOMEM");
	char b[32];
	snprintf(b, sizeof b, "%d", posted);
	char w[32];
	snprintf(w, sizeof w, "%u", ia.cap.max_send_wr);
	report("post_send_queue_full_after", b, w);

	/* The receive queue likewise; too many SGEs is EINVAL. */
	uint32_t rsge = ia.cap.max_recv_sge + 1;
	struct ibv_recv_wr rw, *rbad = NULL;
	memset(&rw, 0, sizeof rw);
	rw.sg_list = sg;
	rw.num_sge = rsge;
	ret_case("post_recv_too_many_sge", ibv_post_recv(s.qp, &rw, &rbad), "EINVAL");
	posted = 0;
	err = 0;
	for (uint32_t i = 0; i <= ia.cap.max_recv_wr && !err; i++) {
		err = post_recv1(q.qp, 200 + i, lbuf, 8, lmr->lkey);
		if (!err)
			posted++;
	}
	ret_case("post_recv_queue_full", err, "ENOMEM");
	snprintf(b, sizeof b, "%d", posted);
	snprintf(w, sizeof w, "%u", ia.cap.max_recv_wr);
	report("post_recv_queue_full_after", b, w);
	rmsink(&s);
	rmsink(&q);
}

/* Local protection errors found when the requester reads its SGEs. */
static void local_prot_cases(void)
{
	struct {
		const char *name;
		enum ibv_wr_opcode op;
		int badkey;
		int oob;
		const char *want;
	} cs[] = {
		/* rxe: a key that names no MR of the PD fails the lookup
		 * (LOC_QP_OP_ERR), a range outside the MR fails the range check
		 * (LOC_PROT_ERR). */
		{"send_sge_bad_lkey", IBV_WR_SEND, 1, 0, "LOC_QP_OP_ERR"},
		{"send_sge_outside_mr", IBV_WR_SEND, 0, 1, "LOC_PROT_ERR"},
		{"write_sge_bad_lkey", IBV_WR_RDMA_WRITE, 1, 0, "LOC_QP_OP_ERR"},
		{"write_sge_outside_mr", IBV_WR_RDMA_WRITE, 0, 1, "LOC_PROT_ERR"},
	};
	for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
		struct sink s;
		mksink(&s, 4);
		void *addr = cs[i].oob ? lbuf + 4096 - 16 : lbuf;
		uint32_t key = cs[i].badkey ? lmr->lkey ^ 0x5a5a5a00 : lmr->lkey;
		if (post_op(s.qp, 1, cs[i].op, addr, 64, key, 0x1000, 1))
			die("post %s", cs[i].name);
		report(cs[i].name, wc_of(s.cq, 1, 5000), cs[i].want);
		char n[96];
		snprintf(n, sizeof n, "%s_qp_state", cs[i].name);
		report(n, qs(qp_state(s.qp)), "ERR");
		snprintf(n, sizeof n, "%s_next", cs[i].name);
		if (post_write(s.qp, 2, lbuf, 8, lmr->lkey, 0x1000, 1))
			die("post next");
		report(n, wc_of(s.cq, 2, 2000), "WR_FLUSH_ERR");
		rmsink(&s);
	}
}

/* Work requests rxe's provider queues without looking at the opcode: its
 * requester fails them (LOC_QP_OP_ERR, QP to ERR). tbrdma refuses them at
 * post time (EINVAL), before anything is queued. */
static void opcode_cases(void)
{
	struct sink s;
	mksink(&s, 4);
	int r = post_op(s.qp, 1, (enum ibv_wr_opcode)99, lbuf, 8, lmr->lkey, 0x1000, 1);
	known("post_send_unknown_opcode", r ? en(r) : wc_of(s.cq, 1, 2000), "LOC_QP_OP_ERR");
	rmsink(&s);

	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_qp *uc = mkqp(cq, IBV_QPT_UC, 2, NULL);
	struct ibv_qp *dst = mkqp(cq, IBV_QPT_UC, 2, NULL);
	struct ibv_qp_attr a;
	rtr_attr(&a, dst->qp_num, 0, &gid);
	if (to_init(dst, 0) || to_init(uc, 0) ||
	    ibv_modify_qp(uc, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN))
		die("uc connect");
	rts_attr(&a, 0, 14, 7);
	if (ibv_modify_qp(uc, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("uc rts");
	r = post_op(uc, 2, IBV_WR_RDMA_READ, lbuf, 8, lmr->lkey, 0x1000, 1);
	known("post_send_read_on_uc", r ? en(r) : wc_of(cq, 2, 2000), "LOC_QP_OP_ERR");
	ibv_destroy_qp(uc);
	ibv_destroy_qp(dst);
	ibv_destroy_cq(cq);
}

/* A UD send larger than the path MTU: rxe completes it successfully and
 * sends nothing (IBA C10-93.1.1). */
static void ud_cases(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_qp *qp = mkqp(cq, IBV_QPT_UD, 2, NULL);
	struct ibv_qp_attr a;
	if (to_init(qp, 0))
		die("ud init");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		die("ud rtr");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("ud rts");
	struct ibv_ah_attr aa;
	memset(&aa, 0, sizeof aa);
	aa.is_global = 1;
	aa.grh.dgid = gid;
	aa.grh.sgid_index = gidx;
	aa.grh.hop_limit = 64;
	aa.port_num = 1;
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah)
		die("create ah");
	int mtu = 128 << pattr.active_mtu;
	struct ibv_sge sge = {.addr = (uintptr_t)bigmr->addr, .length = 2 * mtu, .lkey = bigmr->lkey};
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qp->qp_num;
	wr.wr.ud.remote_qkey = 0x11111111;
	int r = ibv_post_send(qp, &wr, &bad);
	report("ud_send_over_mtu", r ? en(r) : wc_of(cq, 1, 2000), "SUCCESS");
	ibv_destroy_qp(qp);
	ibv_destroy_ah(ah);
	ibv_destroy_cq(cq);

	struct ibv_pd *p = ibv_alloc_pd(ctx);
	ah = p ? ibv_create_ah(p, &aa) : NULL;
	if (!ah)
		die("busy setup ah");
	ret_case("busy_dealloc_pd_with_ah", ibv_dealloc_pd(p), "EBUSY");
	ibv_destroy_ah(ah);
	ret_case("busy_dealloc_pd_after_ah", ibv_dealloc_pd(p), "0");
}

static void mr_cases(void)
{
	uint8_t *m = guarded(2, 0);
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(pd, m, 0, IBV_ACCESS_LOCAL_WRITE);
	report("reg_mr_length_0", ptr_got(mr, errno), "EINVAL");
	if (mr)
		ibv_dereg_mr(mr);
	/* The guard page after the mapping is not accessible. */
	errno = 0;
	mr = ibv_reg_mr(pd, m + 2 * PG, PG, 0);
	report("reg_mr_prot_none", ptr_got(mr, errno), "EFAULT");
	if (mr)
		ibv_dereg_mr(mr);
	errno = 0;
	mr = ibv_reg_mr(pd, m + PG, 2 * PG, IBV_ACCESS_LOCAL_WRITE);
	report("reg_mr_runs_into_guard", ptr_got(mr, errno), "EFAULT");
	if (mr)
		ibv_dereg_mr(mr);
	uint8_t *u = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(u, PG);
	errno = 0;
	mr = ibv_reg_mr(pd, u, PG, IBV_ACCESS_LOCAL_WRITE);
	report("reg_mr_unmapped", ptr_got(mr, errno), "EFAULT");
	if (mr)
		ibv_dereg_mr(mr);
	errno = 0;
	mr = ibv_reg_mr(pd, NULL, PG, 0);
	report("reg_mr_null_addr", ptr_got(mr, errno), "EFAULT");
	if (mr)
		ibv_dereg_mr(mr);
	uint8_t *ro = mmap(NULL, PG, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	errno = 0;
	mr = ibv_reg_mr(pd, ro, PG, IBV_ACCESS_LOCAL_WRITE);
	report("reg_mr_readonly_local_write", ptr_got(mr, errno), "EFAULT");
	if (mr)
		ibv_dereg_mr(mr);
	errno = 0;
	mr = ibv_reg_mr(pd, ro, PG, IBV_ACCESS_REMOTE_READ);
	report("reg_mr_readonly_remote_read", ptr_got(mr, errno), "0");
	if (mr)
		ibv_dereg_mr(mr);
	munmap(ro, PG);
	errno = 0;
	mr = ibv_reg_mr(pd, m, PG, IBV_ACCESS_REMOTE_WRITE);
	report("reg_mr_remote_write_no_local_write", ptr_got(mr, errno), "EINVAL");
	if (mr)
		ibv_dereg_mr(mr);
	errno = 0;
	mr = ibv_reg_mr(pd, m, PG, IBV_ACCESS_REMOTE_ATOMIC);
	report("reg_mr_remote_atomic_no_local_write", ptr_got(mr, errno), "EINVAL");
	if (mr)
		ibv_dereg_mr(mr);
	/* ib_check_mr_access runs before the pages are pinned. */
	errno = 0;
	mr = ibv_reg_mr(pd, u, PG, IBV_ACCESS_REMOTE_WRITE);
	report("reg_mr_remote_write_no_local_write_unmapped", ptr_got(mr, errno), "EINVAL");
	if (mr)
		ibv_dereg_mr(mr);
	/* rxe has no on-demand paging in 6.1: ib_check_mr_access refuses. */
	errno = 0;
	mr = ibv_reg_mr(pd, m, PG, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	report("reg_mr_on_demand", ptr_got(mr, errno), "EINVAL");
	if (mr)
		ibv_dereg_mr(mr);
	munmap(m - PG, 4 * PG);
}

static void busy_cases(void)
{
	struct ibv_pd *p = ibv_alloc_pd(ctx);
	uint8_t buf[64];
	struct ibv_mr *mr = ibv_reg_mr(p, buf, sizeof buf, 0);
	if (!p || !mr)
		die("busy setup");
	ret_case("busy_dealloc_pd_with_mr", ibv_dealloc_pd(p), "EBUSY");
	ibv_dereg_mr(mr);
	ret_case("busy_dealloc_pd_after", ibv_dealloc_pd(p), "0");

	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, ch, 0);
	if (!ch || !cq)
		die("busy setup cq");
	ret_case("busy_destroy_comp_channel_with_cq", ibv_destroy_comp_channel(ch), "EBUSY");
	struct ibv_srq_init_attr sa;
	memset(&sa, 0, sizeof sa);
	sa.attr.max_wr = 4;
	sa.attr.max_sge = 1;
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	if (!srq)
		die("busy setup srq");
	struct ibv_qp *qp = mkqp(cq, IBV_QPT_RC, 2, srq);
	ret_case("busy_destroy_cq_with_qp", ibv_destroy_cq(cq), "EBUSY");
	ret_case("busy_destroy_srq_with_qp", ibv_destroy_srq(srq), "EBUSY");
	ret_case("busy_dealloc_pd_with_qp", ibv_dealloc_pd(pd), "EBUSY");
	ret_case("busy_destroy_qp", ibv_destroy_qp(qp), "0");
	ret_case("busy_destroy_srq_after", ibv_destroy_srq(srq), "0");
	ret_case("busy_destroy_cq_after", ibv_destroy_cq(cq), "0");
	ret_case("busy_destroy_comp_channel_after", ibv_destroy_comp_channel(ch), "0");
}

/* fork() after the library started: the child gets EOPNOTSUPP and one
 * message instead of a hang (tbrdma; rdma-core would serve the child);
 * the parent goes on. */
static void fork_cases(void)
{
	int res[2], errp[2];
	if (pipe(res) || pipe(errp))
		die("pipe");
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		alarm(10);
		dup2(errp[1], 2);
		close(res[0]);
		close(errp[0]);
		int n = -1;
		errno = 0;
		struct ibv_device **l = ibv_get_device_list(&n);
		int e1 = l ? 0 : errno;
		errno = 0;
		struct ibv_pd *p = ibv_alloc_pd(ctx);
		int e2 = p ? 0 : errno;
		char out[64];
		int k = snprintf(out, sizeof out, "%d %d\n", e1, e2);
		if (write(res[1], out, k) != k)
			_exit(3);
		exit(0);
	}
	close(res[1]);
	close(errp[1]);
	char out[64] = "", msg[1024] = "";
	int k = readline(res[0], out, sizeof out, 15000);
	long long end = now_ms() + 15000;
	int status = 0, done = 0;
	while (now_ms() < end) {
		if (waitpid(pid, &status, WNOHANG) == pid) {
			done = 1;
			break;
		}
		usleep(10000);
	}
	if (!done) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	ssize_t m = read(errp[0], msg, sizeof msg - 1);
	msg[m > 0 ? m : 0] = 0;
	close(res[0]);
	close(errp[0]);
	int e1 = -1, e2 = -1;
	if (k)
		sscanf(out, "%d %d", &e1, &e2);
	report("fork_child_get_device_list", k ? en(e1) : "hang", "EOPNOTSUPP");
	report("fork_child_alloc_pd", k ? en(e2) : "hang", "EOPNOTSUPP");
	report("fork_child_message", strstr(msg, "forked") ? "yes" : "no", "yes");
	report("fork_child_exits", done && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "yes" : "no", "yes");
	struct ibv_pd *p = ibv_alloc_pd(ctx);
	report("fork_parent_alloc_pd", ptr_got(p, errno), "0");
	if (p)
		ibv_dealloc_pd(p);
	struct sink s;
	mksink(&s, 4);
	ret_case("fork_parent_post_send", post_write(s.qp, 1, lbuf, 8, lmr->lkey, 0x1000, 1), "0");
	rmsink(&s);
}

/* =============================================================== remote */

static const char *peer_addr;
static int peer_port = DEFAULT_PORT;

struct sess {
	int fd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint64_t rw_addr, ro_addr;
	uint32_t rw_rkey, ro_rkey, rw_len, ro_len;
};

static int sess_open(struct sess *s, int peer_access, int recvlen, int badlkey, int timeout, int retry)
{
	memset(s, 0, sizeof *s);
	s->fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(peer_port)};
	inet_pton(AF_INET, peer_addr, &sa.sin_addr);
	int tries = 0;
	while (connect(s->fd, (struct sockaddr *)&sa, sizeof sa)) {
		if (++tries > 50)
			die("connect to peer %s:%d", peer_addr, peer_port);
		usleep(100000);
		close(s->fd);
		s->fd = socket(AF_INET, SOCK_STREAM, 0);
	}
	int one = 1;
	setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	s->cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	if (!s->cq)
		die("create cq");
	s->qp = mkqp(s->cq, IBV_QPT_RC, 8, NULL);
	if (to_init(s->qp, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ))
		die("init");
	uint32_t psn = 0x2000 + (s->qp->qp_num & 0xfff);
	char gh[64];
	gid_hex(&gid, gh);
	sendline(s->fd, "S %d %d %d %u %u %s", peer_access, recvlen, badlkey, s->qp->qp_num, psn, gh);
	char line[512], pgh[64];
	unsigned pqpn, ppsn;
	unsigned long long rwa, roa;
	if (!readline(s->fd, line, sizeof line, 10000) ||
	    sscanf(line, "R %u %u %63s %llu %u %u %llu %u %u", &pqpn, &ppsn, pgh, &rwa, &s->rw_rkey, &s->rw_len, &roa,
		   &s->ro_rkey, &s->ro_len) != 9)
		die("peer answer: %s", line);
	s->rw_addr = rwa;
	s->ro_addr = roa;
	union ibv_gid pg;
	hex_gid(pgh, &pg);
	struct ibv_qp_attr a;
	rtr_attr(&a, pqpn, ppsn, &pg);
	if (ibv_modify_qp(s->qp, &a, rtr_mask))
		die("rtr");
	rts_attr(&a, psn, timeout, retry);
	if (ibv_modify_qp(s->qp, &a, rts_mask))
		die("rts");
	return 0;
}

/* Asks the peer for n completions and formats its answer as
 * "state=S recv=A,B written=K canary=ok". */
static void sess_check(struct sess *s, int n, char *out, size_t size)
{
	char line[256];
	sendline(s->fd, "C %d", n);
	if (!readline(s->fd, line, sizeof line, 10000)) {
		snprintf(out, size, "no-answer");
		return;
	}
	int st, k, wr, cnt, v[8];
	char can[8];
	if (sscanf(line, "K %d %7s %d %d", &st, can, &wr, &cnt) != 4) {
		snprintf(out, size, "bad-answer");
		return;
	}
	char *p = line; /* skip "K st canary written n" */
	for (int i = 0; i < 5 && p; i++)
		p = strchr(p + 1, ' ');
	for (k = 0; k < cnt && k < 8 && p; k++) {
		v[k] = atoi(p);
		p = strchr(p + 1, ' ');
	}
	int o = snprintf(out, size, "state=%s recv=", qs(st));
	if (k == 0)
		o += snprintf(out + o, size - o, "none");
	for (int i = 0; i < k; i++)
		o += snprintf(out + o, size - o, "%s%s", i ? "," : "", ws(v[i]));
	snprintf(out + o, size - o, " written=%d canary=%s", wr, can);
}

static void sess_close(struct sess *s)
{
	sendline(s->fd, "E");
	close(s->fd);
	ibv_destroy_qp(s->qp);
	ibv_destroy_cq(s->cq);
}

enum rop {
	R_WRITE_OK,
	R_WRITE_OOB,
	R_WRITE_BADRKEY,
	R_WRITE_RO,
	R_READ_OOB,
	R_ATOMIC_OOB,
	R_ATOMIC_RO,
	R_WRITE_NOQPACCESS,
	R_SEND_TOO_BIG,
	R_SEND_BADRECVKEY,
	R_READ_LOCAL_BADKEY,
	R_READ_LOCAL_OOB,
};

static void remote_case(const char *name, enum rop op, const char *want, const char *want_peer)
{
	struct sess s;
	int access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	int recvlen = 64, badkey = 0;
	if (op == R_WRITE_NOQPACCESS)
		access = 0;
	if (op == R_SEND_TOO_BIG)
		recvlen = 16;
	if (op == R_SEND_BADRECVKEY)
		badkey = 1;
	sess_open(&s, access, recvlen, badkey, 14, 7);
	memset(lmem, 0x44, 7 * PG);
	int r = 0;
	switch (op) {
	case R_WRITE_OK:
		r = post_write(s.qp, 1, lbuf, 64, lmr->lkey, s.rw_addr, s.rw_rkey);
		break;
	case R_WRITE_OOB:
		r = post_write(s.qp, 1, lbuf, 64, lmr->lkey, s.rw_addr + s.rw_len - 16, s.rw_rkey);
		break;
	case R_WRITE_BADRKEY:
		r = post_write(s.qp, 1, lbuf, 64, lmr->lkey, s.rw_addr, s.rw_rkey ^ 0x5a5a5a00);
		break;
	case R_WRITE_RO:
		r = post_write(s.qp, 1, lbuf, 64, lmr->lkey, s.ro_addr, s.ro_rkey);
		break;
	case R_WRITE_NOQPACCESS:
		r = post_write(s.qp, 1, lbuf, 64, lmr->lkey, s.rw_addr, s.rw_rkey);
		break;
	case R_READ_OOB:
		r = post_op(s.qp, 1, IBV_WR_RDMA_READ, lbuf, 64, lmr->lkey, s.rw_addr + s.rw_len - 16, s.rw_rkey);
		break;
	case R_ATOMIC_OOB:
		r = post_op(s.qp, 1, IBV_WR_ATOMIC_FETCH_AND_ADD, lbuf, 8, lmr->lkey, s.rw_addr + s.rw_len, s.rw_rkey);
		break;
	case R_ATOMIC_RO:
		r = post_op(s.qp, 1, IBV_WR_ATOMIC_CMP_AND_SWP, lbuf, 8, lmr->lkey, s.ro_addr, s.ro_rkey);
		break;
	case R_SEND_TOO_BIG:
	case R_SEND_BADRECVKEY:
		r = post_op(s.qp, 1, IBV_WR_SEND, lbuf, op == R_SEND_TOO_BIG ? 64 : 16, lmr->lkey, 0, 0);
		break;
	case R_READ_LOCAL_BADKEY:
		r = post_op(s.qp, 1, IBV_WR_RDMA_READ, lbuf, 64, lmr->lkey ^ 0x5a5a5a00, s.rw_addr, s.rw_rkey);
		break;
	case R_READ_LOCAL_OOB:
		r = post_op(s.qp, 1, IBV_WR_RDMA_READ, lbuf + 4096 - 16, 64, lmr->lkey, s.rw_addr, s.rw_rkey);
		break;
	}
	if (r)
		die("post %s: %s", name, en(r));
	report(name, wc_of(s.cq, 1, 5000), want);
	int ok = op == R_WRITE_OK;
	char n[96], got[160];
	snprintf(n, sizeof n, "%s_qp_state", name);
	report(n, qs(qp_state(s.qp)), ok ? "RTS" : "ERR");
	snprintf(n, sizeof n, "%s_next", name);
	if (post_write(s.qp, 2, lbuf, 8, lmr->lkey, s.rw_addr, s.rw_rkey))
		die("post next");
	report(n, wc_of(s.cq, 2, 5000), ok ? "SUCCESS" : "WR_FLUSH_ERR");
	/* Nothing outside the local MR changed (a READ may place data in it). */
	snprintf(n, sizeof n, "%s_local_canary", name);
	int lc = changed(lmem, 512, 0x44) + changed(lbuf + 4096, 7 * PG - 512 - 4096, 0x44);
	report(n, lc ? "bad" : "ok", "ok");
	/* The responder: its QP, its receives, its memory. A request refused
	 * by the responder moves its QP to ERR (both receives complete). */
	int peer_err = strncmp(want_peer, "state=ERR", 9) == 0;
	sess_check(&s, peer_err ? 2 : 0, got, sizeof got);
	snprintf(n, sizeof n, "%s_peer", name);
	report(n, got, want_peer);
	sess_close(&s);
}

static void remote_cases(void)
{
	const char *perr = "state=ERR recv=WR_FLUSH_ERR,WR_FLUSH_ERR written=0 canary=ok";
	remote_case("remote_write_ok", R_WRITE_OK, "SUCCESS", "state=RTS recv=none written=64 canary=ok");
	remote_case("remote_write_outside_mr", R_WRITE_OOB, "REM_ACCESS_ERR", perr);
	remote_case("remote_write_bad_rkey", R_WRITE_BADRKEY, "REM_ACCESS_ERR", perr);
	remote_case("remote_write_mr_no_remote_write", R_WRITE_RO, "REM_ACCESS_ERR", perr);
	remote_case("remote_read_outside_mr", R_READ_OOB, "REM_ACCESS_ERR", perr);
	remote_case("remote_atomic_outside_mr", R_ATOMIC_OOB, "REM_ACCESS_ERR", perr);
	remote_case("remote_atomic_mr_no_remote_atomic", R_ATOMIC_RO, "REM_ACCESS_ERR", perr);
	/* The responder QP lacks REMOTE_WRITE: rxe's check_op_valid calls
	 * that an unsupported opcode (NAK invalid request). */
	remote_case("remote_write_qp_no_remote_write", R_WRITE_NOQPACCESS, "REM_INV_REQ_ERR", perr);
	/* A SEND longer than the receive buffer, a receive with a wrong lkey:
	 * rxe's responder fails copy_data (malformed WQE, class A): the
	 * receive completes LOC_QP_OP_ERR, the requester gets NAK remote
	 * operation error. Nothing is placed beyond the receive's SGE. */
	remote_case("remote_recv_too_small", R_SEND_TOO_BIG, "REM_OP_ERR",
		    "state=ERR recv=LOC_QP_OP_ERR,WR_FLUSH_ERR written=0 canary=ok");
	remote_case("remote_recv_bad_lkey", R_SEND_BADRECVKEY, "REM_OP_ERR",
		    "state=ERR recv=LOC_QP_OP_ERR,WR_FLUSH_ERR written=0 canary=ok");
	/* The READ's response lands in a local SGE that is wrong: rxe's
	 * completer fails copy_data (LOC_PROT_ERR); the responder is fine. */
	remote_case("remote_read_local_bad_lkey", R_READ_LOCAL_BADKEY, "LOC_PROT_ERR",
		    "state=RTS recv=none written=0 canary=ok");
	remote_case("remote_read_local_outside_mr", R_READ_LOCAL_OOB, "LOC_PROT_ERR",
		    "state=RTS recv=none written=0 canary=ok");
}

/* The peer process dies (SIGKILL) with the connection up: the next request
 * ends in RETRY_EXC_ERR within (retry_cnt + 1) × 4.096 µs × 2^timeout,
 * later ones in WR_FLUSH_ERR. */
static void peer_death_case(void)
{
	const int timeout = 14, retry = 3;
	struct sess s;
	sess_open(&s, IBV_ACCESS_REMOTE_WRITE, 16, 0, timeout, retry);
	if (post_write(s.qp, 1, lbuf, 64, lmr->lkey, s.rw_addr, s.rw_rkey))
		die("post");
	report("peer_death_before", wc_of(s.cq, 1, 5000), "SUCCESS");
	sendline(s.fd, "D");
	char line[64];
	int gone = readline(s.fd, line, sizeof line, 10000) == 0;
	report("peer_death_peer_gone", gone ? "yes" : "no", "yes");
	long long bound = (long long)(retry + 1) * 4096LL * (1LL << timeout) / 1000000 + 1;
	long long t0 = now_ms();
	if (post_write(s.qp, 2, lbuf, 64, lmr->lkey, s.rw_addr, s.rw_rkey) ||
	    post_write(s.qp, 3, lbuf, 64, lmr->lkey, s.rw_addr, s.rw_rkey))
		die("post");
	const char *st = wc_of(s.cq, 2, (int)bound + 10000);
	long long took = now_ms() - t0;
	report("peer_death", st, "RETRY_EXC_ERR");
	note("peer death: RETRY_EXC_ERR after %lld ms; bound %lld ms (+1000 ms margin)", took, bound);
	report("peer_death_within_bound", took <= bound + 1000 ? "yes" : "no", "yes");
	report("peer_death_next", wc_of(s.cq, 3, 2000), "WR_FLUSH_ERR");
	report("peer_death_qp_state", qs(qp_state(s.qp)), "ERR");
	close(s.fd);
	ibv_destroy_qp(s.qp);
	ibv_destroy_cq(s.cq);
}

int main(int argc, char **argv)
{
	int server = 0, c;
	while ((c = getopt(argc, argv, "sp:")) != -1) {
		switch (c) {
		case 's': server = 1; break;
		case 'p': peer_port = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: badinput -s [-p port] | badinput [-p port] [peer-addr]\n");
			return 2;
		}
	}
	if (optind < argc)
		peer_addr = argv[optind];
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	open_dev();
	if (server)
		return serve(peer_port);

	note("device %s, gid index %d, max_cqe %d max_qp_wr %d max_sge %d", ibv_get_device_name(ctx->device), gidx,
	     dattr.max_cqe, dattr.max_qp_wr, dattr.max_sge);
	lmem = guarded(7, 0x44);
	lbuf = lmem + 512;
	lmr = ibv_reg_mr(pd, lbuf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	bigmr = ibv_reg_mr(pd, lmem + 3 * PG, 4 * PG, IBV_ACCESS_LOCAL_WRITE);
	if (!lmr || !bigmr)
		die("reg mr");

	null_cases();
	cq_cases();
	create_qp_cases();
	srq_ah_cases();
	modify_qp_cases();
	post_state_cases();
	post_limit_cases();
	local_prot_cases();
	opcode_cases();
	ud_cases();
	mr_cases();
	busy_cases();
	fork_cases();
	if (peer_addr) {
		remote_cases();
		peer_death_case();
	} else {
		note("no peer address: remote cases skipped");
	}
	printf("%d cases, %d failed, %d known deviations\n", ncase, nfail, nknown);
	return nfail ? 1 : 0;
}
