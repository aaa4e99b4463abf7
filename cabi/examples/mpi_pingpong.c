/*
 * mpi_pingpong: MPI ping-pong latency and streaming bandwidth between every
 * pair of ranks, every message checked byte for byte.
 *
 * It is plain MPI; nothing in it knows about tbrdma. Run it over tbrdma
 * with Open MPI's UCX layer (docs/engines.md):
 *
 *   mpicc -O2 -o mpi_pingpong mpi_pingpong.c
 *   mpirun -np 2 --host A,B --mca pml ucx -x UCX_TLS=rc_verbs,ud_verbs:aux \
 *       tbrdma exec -- ./mpi_pingpong
 *
 * Options: -l SIZE (latency message, default 8), -n ITERS (latency
 * round trips, default 1000), -b SIZE (bandwidth message, default 4 MiB),
 * -m ITERS (bandwidth messages, default 64), -w WINDOW (messages in flight,
 * default 8).
 *
 * Each pair (i, j), i < j, prints one line per test from rank i:
 *   lat 0<->1 bytes 8 iters 1000 usec 12.34
 *   bw 0->1 bytes 4194304 iters 64 MBps 1234.5
 * and rank 0 ends with "verified N pairs" and exit 0 once every rank saw
 * every byte it expected. A wrong byte makes that rank print where and
 * call MPI_Abort (exit non-zero).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long lat_size = 8, lat_iters = 1000;
static long bw_size = 4L << 20, bw_iters = 64, window = 8;

/* The byte at offset off of message seq from rank src. */
static inline unsigned char pattern(int src, long seq, long off)
{
	return (unsigned char)(src * 131 + seq * 31 + off * 7 + (off >> 8));
}

static void fill(unsigned char *buf, long len, int src, long seq)
{
	for (long off = 0; off < len; off++)
		buf[off] = pattern(src, seq, off);
}

static void check(const unsigned char *buf, long len, int src, long seq, const char *what)
{
	for (long off = 0; off < len; off++) {
		if (buf[off] != pattern(src, seq, off)) {
			int me;
			MPI_Comm_rank(MPI_COMM_WORLD, &me);
			fprintf(stderr, "rank %d: %s message %ld from rank %d: byte %ld is 0x%02x, want 0x%02x\n",
				me, what, seq, src, off, buf[off], pattern(src, seq, off));
			MPI_Abort(MPI_COMM_WORLD, 3);
		}
	}
}

static long arg(const char *s, const char *flag)
{
	char *end;
	long v = strtol(s, &end, 0);
	if (*s == '\0' || *end != '\0' || v <= 0) {
		fprintf(stderr, "mpi_pingpong: %s wants a positive number, not %s\n", flag, s);
		exit(2);
	}
	return v;
}

/* One pair's latency test: i sends first, j echoes what it got. */
static void latency(int me, int i, int j, unsigned char *sbuf, unsigned char *rbuf)
{
	int peer = me == i ? j : i;
	MPI_Status st;
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();
	for (long n = 0; n < lat_iters; n++) {
		if (me == i) {
			fill(sbuf, lat_size, me, n);
			MPI_Send(sbuf, lat_size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
			MPI_Recv(rbuf, lat_size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &st);
			check(rbuf, lat_size, peer, n, "latency echo");
		} else {
			MPI_Recv(rbuf, lat_size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &st);
			check(rbuf, lat_size, peer, n, "latency");
			fill(sbuf, lat_size, me, n);
			MPI_Send(sbuf, lat_size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
		}
	}
	double t = MPI_Wtime() - t0;
	if (me == i)
		printf("lat %d<->%d bytes %ld iters %ld usec %.2f\n", i, j, lat_size, lat_iters,
		       t * 1e6 / (2.0 * lat_iters));
}

/* One pair's bandwidth test: i streams bw_iters messages, window at a
 * time, to j, which checks each; j's one-byte reply ends the timing. */
static void bandwidth(int me, int i, int j, unsigned char **bufs)
{
	int peer = me == i ? j : i;
	MPI_Request *reqs = calloc(window, sizeof *reqs);
	unsigned char ack = 0;
	if (!reqs) {
		perror("calloc");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	if (me == i) /* the patterns are written before the clock starts */
		for (long w = 0; w < window; w++)
			fill(bufs[w], bw_size, me, w);
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();
	for (long n = 0; n < bw_iters; n += window) {
		long k = bw_iters - n < window ? bw_iters - n : window;
		for (long w = 0; w < k; w++) {
			if (me == i)
				MPI_Isend(bufs[w], bw_size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[w]);
			else
				MPI_Irecv(bufs[w], bw_size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[w]);
		}
		MPI_Waitall(k, reqs, MPI_STATUSES_IGNORE);
		if (me == j)
			for (long w = 0; w < k; w++) {
				check(bufs[w], bw_size, peer, w, "bandwidth");
				memset(bufs[w], 0, bw_size);
			}
	}
	if (me == i) {
		MPI_Recv(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		double t = MPI_Wtime() - t0;
		printf("bw %d->%d bytes %ld iters %ld MBps %.1f\n", i, j, bw_size, bw_iters,
		       (double)bw_size * bw_iters / t / 1e6);
	} else {
		MPI_Send(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
	}
	free(reqs);
}

int main(int argc, char **argv)
{
	int me, size, opt;
	char host[256] = "";

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	while ((opt = getopt(argc, argv, "l:n:b:m:w:")) != -1) {
		switch (opt) {
		case 'l': lat_size = arg(optarg, "-l"); break;
		case 'n': lat_iters = arg(optarg, "-n"); break;
		case 'b': bw_size = arg(optarg, "-b"); break;
		case 'm': bw_iters = arg(optarg, "-m"); break;
		case 'w': window = arg(optarg, "-w"); break;
		default:
			if (me == 0)
				fprintf(stderr, "usage: mpi_pingpong [-l SIZE] [-n ITERS] [-b SIZE] [-m ITERS] [-w WINDOW]\n");
			MPI_Finalize();
			return 2;
		}
	}
	if (size < 2) {
		if (me == 0)
			fprintf(stderr, "mpi_pingpong: needs 2 or more ranks (mpirun -np 2)\n");
		MPI_Finalize();
		return 2;
	}
	gethostname(host, sizeof host - 1);

	long big = lat_size > bw_size ? lat_size : bw_size;
	unsigned char *sbuf = malloc(lat_size), *rbuf = malloc(lat_size);
	unsigned char **bufs = calloc(window, sizeof *bufs);
	if (!sbuf || !rbuf || !bufs) {
		perror("malloc");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	for (long w = 0; w < window; w++)
		if (!(bufs[w] = malloc(big))) {
			perror("malloc");
			MPI_Abort(MPI_COMM_WORLD, 2);
		}

	int pairs = 0;
	for (int i = 0; i < size; i++)
		for (int j = i + 1; j < size; j++) {
			pairs++;
			if (me == i || me == j) {
				latency(me, i, j, sbuf, rbuf);
				bandwidth(me, i, j, bufs);
			} else {
				/* the others wait at the tests' barriers */
				MPI_Barrier(MPI_COMM_WORLD);
				MPI_Barrier(MPI_COMM_WORLD);
			}
			fflush(stdout);
		}

	/* Everyone's rank, summed everywhere: a collective across the job. */
	long sum = 0, mine = me + 1;
	MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (sum != (long)size * (size + 1) / 2) {
		fprintf(stderr, "rank %d: allreduce gave %ld, want %ld\n", me, sum, (long)size * (size + 1) / 2);
		MPI_Abort(MPI_COMM_WORLD, 3);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	if (me == 0)
		printf("verified %d pairs, %d ranks\n", pairs, size);
	for (long w = 0; w < window; w++)
		free(bufs[w]);
	free(bufs);
	free(sbuf);
	free(rbuf);
	MPI_Finalize();
	return 0;
}
