package verbs

import (
	"github.com/tbrdma/tbrdma/verbs/internal/mem"
)

// gather copies len(dst) bytes starting at byte off of the message the SGE
// list describes into dst. Like rdma_rxe's requester it returns
// WCLocQPOpErr when an SGE's lkey names no region of pd (rxe's lookup_mr
// fails: copy_data's -EINVAL, which rxe_requester reports as
// IB_WC_LOC_QP_OP_ERR), WCLocProtErr when the SGE reaches outside its
// region (mr_check_range: -EFAULT, IB_WC_LOC_PROT_ERR), and WCLocLenErr
// when the list is too short.
func (c *Context) gather(dst []byte, sgl []SGE, off uint64, pd uint32) WCStatus {
	c.mrs.RLock()
	defer c.mrs.RUnlock()
	for _, s := range sgl {
		if len(dst) == 0 {
			return WCSuccess
		}
		l := uint64(s.Length)
		if off >= l {
			off -= l
			continue
		}
		n := l - off
		if n > uint64(len(dst)) {
			n = uint64(len(dst))
		}
		src, st := c.mrs.Lookup(uint32(s.LKey), pd, s.Addr+off, n, 0)
		if st != mem.OK {
			return gatherStatus(st)
		}
		copy(dst, src)
		dst = dst[n:]
		off = 0
	}
	if len(dst) != 0 {
		return WCLocLenErr
	}
	return WCSuccess
}

// gatherStatus is the completion status of a requester whose SGE failed
// the lookup with st.
func gatherStatus(st mem.Status) WCStatus {
	if st == mem.OutOfRange {
		return WCLocProtErr
	}
	return WCLocQPOpErr
}

// contiguous returns the n bytes at byte off of the message the SGE list
// describes when they lie in one SGE of registered memory of pd, or nil
// (then gather them). The slice aliases the registered buffer.
func (c *Context) contiguous(sgl []SGE, off, n uint64, pd uint32) []byte {
	for _, s := range sgl {
		l := uint64(s.Length)
		if off >= l {
			off -= l
			continue
		}
		if off+n > l {
			return nil
		}
		c.mrs.RLock()
		src, st := c.mrs.Lookup(uint32(s.LKey), pd, s.Addr+off, n, 0)
		c.mrs.RUnlock()
		if st != mem.OK {
			return nil
		}
		return src
	}
	return nil
}

// scatter copies data into the message the SGE list describes, starting at
// byte off. The memory must grant LOCAL_WRITE.
func (c *Context) scatter(sgl []SGE, off uint64, data []byte, pd uint32) WCStatus {
	c.mrs.RLock()
	defer c.mrs.RUnlock()
	for _, s := range sgl {
		if len(data) == 0 {
			return WCSuccess
		}
		l := uint64(s.Length)
		if off >= l {
			off -= l
			continue
		}
		n := l - off
		if n > uint64(len(data)) {
			n = uint64(len(data))
		}
		dst, st := c.mrs.Lookup(uint32(s.LKey), pd, s.Addr+off, n, mem.LocalWrite)
		if st != mem.OK {
			return WCLocProtErr
		}
		copy(dst, data[:n])
		data = data[n:]
		off = 0
	}
	if len(data) != 0 {
		return WCLocLenErr
	}
	return WCSuccess
}
