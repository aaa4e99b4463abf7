/*
 * rsocket.c: librdmacm's rsockets (rsocket, rbind, ... riowrite).
 *
 * tbrdma's librdmacm has no rsockets: each call fails at once with
 * EOPNOTSUPP, and the first one says so on stderr, with what to use
 * instead, so that rstream, riostream, rcopy and programs preloading
 * librspreload stop with a reason instead of hanging.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <unistd.h>
#include <sys/types.h>
#include <rdma/rsocket.h>

static void unsupported(void)
{
	static atomic_int said;
	if (atomic_exchange(&said, 1) == 0) {
		static const char msg[] =
			"tbrdma: rsockets (rsocket, rbind, rconnect, raccept, rsend, rrecv, riomap, ... as rstream, "
			"riostream, rcopy and librspreload use them) are not supported by tbrdma's librdmacm. "
			"Use the rdma_cm API (rdma_getaddrinfo, rdma_create_ep, rdma_connect, rdma_accept) with verbs, "
			"which tbrdma implements, or run rsocket programs over the kernel's RDMA stack (rdma_rxe).\n";
		ssize_t r = write(2, msg, sizeof msg - 1);
		(void)r;
	}
	errno = EOPNOTSUPP;
}

int rsocket(int domain, int type, int protocol)
{
	(void)domain; (void)type; (void)protocol;
	unsupported();
	return -1;
}

int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	(void)socket; (void)addr; (void)addrlen;
	unsupported();
	return -1;
}

int rlisten(int socket, int backlog)
{
	(void)socket; (void)backlog;
	unsupported();
	return -1;
}

int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	(void)socket; (void)addr; (void)addrlen;
	unsupported();
	return -1;
}

int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	(void)socket; (void)addr; (void)addrlen;
	unsupported();
	return -1;
}

int rshutdown(int socket, int how)
{
	(void)socket; (void)how;
	unsupported();
	return -1;
}

int rclose(int socket)
{
	(void)socket;
	unsupported();
	return -1;
}

ssize_t rrecv(int socket, void *buf, size_t len, int flags)
{
	(void)socket; (void)buf; (void)len; (void)flags;
	unsupported();
	return -1;
}

ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags, struct sockaddr *src_addr, socklen_t *addrlen)
{
	(void)socket; (void)buf; (void)len; (void)flags; (void)src_addr; (void)addrlen;
	unsupported();
	return -1;
}

ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)
{
	(void)socket; (void)msg; (void)flags;
	unsupported();
	return -1;
}

ssize_t rsend(int socket, const void *buf, size_t len, int flags)
{
	(void)socket; (void)buf; (void)len; (void)flags;
	unsupported();
	return -1;
}

ssize_t rsendto(int socket, const void *buf, size_t len, int flags, const struct sockaddr *dest_addr, socklen_t addrlen)
{
	(void)socket; (void)buf; (void)len; (void)flags; (void)dest_addr; (void)addrlen;
	unsupported();
	return -1;
}

ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)
{
	(void)socket; (void)msg; (void)flags;
	unsupported();
	return -1;
}

ssize_t rread(int socket, void *buf, size_t count)
{
	(void)socket; (void)buf; (void)count;
	unsupported();
	return -1;
}

ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt)
{
	(void)socket; (void)iov; (void)iovcnt;
	unsupported();
	return -1;
}

ssize_t rwrite(int socket, const void *buf, size_t count)
{
	(void)socket; (void)buf; (void)count;
	unsupported();
	return -1;
}

ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt)
{
	(void)socket; (void)iov; (void)iovcnt;
	unsupported();
	return -1;
}

int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	(void)fds; (void)nfds; (void)timeout;
	unsupported();
	return -1;
}

int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds, struct timeval *timeout)
{
	(void)nfds; (void)readfds; (void)writefds; (void)exceptfds; (void)timeout;
	unsupported();
	return -1;
}

int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	(void)socket; (void)addr; (void)addrlen;
	unsupported();
	return -1;
}

int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	(void)socket; (void)addr; (void)addrlen;
	unsupported();
	return -1;
}

int rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen)
{
	(void)socket; (void)level; (void)optname; (void)optval; (void)optlen;
	unsupported();
	return -1;
}

int rgetsockopt(int socket, int level, int optname, void *optval, socklen_t *optlen)
{
	(void)socket; (void)level; (void)optname; (void)optval; (void)optlen;
	unsupported();
	return -1;
}

int rfcntl(int socket, int cmd, ...)
{
	(void)socket; (void)cmd;
	unsupported();
	return -1;
}

off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)
{
	(void)socket; (void)buf; (void)len; (void)prot; (void)flags; (void)offset;
	unsupported();
	return -1;
}

int riounmap(int socket, void *buf, size_t len)
{
	(void)socket; (void)buf; (void)len;
	unsupported();
	return -1;
}

size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)
{
	(void)socket; (void)buf; (void)count; (void)offset; (void)flags;
	unsupported();
	return (size_t)-1;
}
