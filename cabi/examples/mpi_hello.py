#!/usr/bin/env python3
"""mpi_hello.py: mpi4py over tbrdma, nothing in it tbrdma-specific.

Every rank sends a message of each size to the next rank around the ring
and checks what it gets from the previous one (a pattern that depends on
the sender, the size and the round); then a broadcast, an allreduce and a
gather of each rank's address check the collectives. Rank 0 prints
"mpi4py verified N ranks" and the job exits 0 when all of it held.

  mpirun -np 2 --host A,B --mca pml ucx -x UCX_TLS=rc_verbs,ud_verbs:aux \\
      tbrdma exec -- python3 mpi_hello.py
"""
import hashlib
import socket
import sys

from mpi4py import MPI


def pattern(src, size, rnd):
    seed = hashlib.sha256(b"%d/%d/%d" % (src, size, rnd)).digest()
    return (seed * (size // len(seed) + 1))[:size]


def main():
    comm = MPI.COMM_WORLD
    me, n = comm.Get_rank(), comm.Get_size()
    if n < 2:
        print("mpi_hello.py: needs 2 or more ranks (mpirun -np 2)", file=sys.stderr)
        return 2
    nxt, prv = (me + 1) % n, (me - 1) % n
    for size in (1, 8, 4096, 65536, 1 << 20, 4 << 20):
        for rnd in range(3):
            out = pattern(me, size, rnd)
            buf = bytearray(size)
            req = comm.Irecv([buf, MPI.BYTE], source=prv, tag=size)
            comm.Send([out, MPI.BYTE], dest=nxt, tag=size)
            req.Wait()
            if bytes(buf) != pattern(prv, size, rnd):
                print("rank %d: %d bytes from rank %d, round %d: wrong data" % (me, size, prv, rnd), file=sys.stderr)
                comm.Abort(3)
    token = comm.bcast("from rank 0" if me == 0 else None, root=0)
    total = comm.allreduce(me + 1, op=MPI.SUM)
    names = comm.gather(socket.gethostname(), root=0)
    if token != "from rank 0" or total != n * (n + 1) // 2:
        print("rank %d: bcast %r, allreduce %d" % (me, token, total), file=sys.stderr)
        comm.Abort(3)
    if me == 0:
        print("mpi4py verified %d ranks (%s)" % (n, MPI.Get_library_version().splitlines()[0]))
        sys.stdout.flush()
    assert names is None or len(names) == n
    return 0


if __name__ == "__main__":
    sys.exit(main())
