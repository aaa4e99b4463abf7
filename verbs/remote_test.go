package verbs_test

import (
	"bytes"
	"encoding"
	"errors"
	"testing"

	"github.com/tbrdma/tbrdma/verbs"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

var (
	_ encoding.BinaryMarshaler   = verbs.RemoteBuffer{}
	_ encoding.BinaryAppender    = verbs.RemoteBuffer{}
	_ encoding.BinaryUnmarshaler = (*verbs.RemoteBuffer)(nil)
)

// TestRemoteBufferLayout: the layout is rping's rping_rdma_info: addr,
// rkey, length, big-endian.
func TestRemoteBufferLayout(t *testing.T) {
	rb := verbs.RemoteBuffer{Addr: 0x0102030405060708, Len: 0x11121314, RKey: 0x21222324}
	b, err := rb.MarshalBinary()
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 0x21, 0x22, 0x23, 0x24, 0x11, 0x12, 0x13, 0x14}
	if err != nil || !bytes.Equal(b, want) || len(b) != verbs.RemoteBufferSize {
		t.Fatalf("MarshalBinary = % x %v, want % x", b, err, want)
	}
	b, _ = rb.AppendBinary([]byte{0xEE})
	if !bytes.Equal(b, append([]byte{0xEE}, want...)) {
		t.Fatalf("AppendBinary = % x", b)
	}
	var got verbs.RemoteBuffer
	if err := got.UnmarshalBinary(append(want, 0, 0, 0)); err != nil || got != rb {
		t.Fatalf("UnmarshalBinary = %v %v, want %v", got, err, rb)
	}
	for n := range verbs.RemoteBufferSize {
		if err := got.UnmarshalBinary(want[:n]); !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Fatalf("UnmarshalBinary of %d bytes = %v", n, err)
		}
	}
}

func TestMRRemoteBuffer(t *testing.T) {
	ctx, err := verbs.NewContext(&verbs.Options{Addr: verbstest.LoopbackAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	pd, _ := ctx.AllocPD()
	mr, err := pd.RegMR(make([]byte, 300), verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if rb := mr.RemoteBuffer(); rb.Addr != mr.Addr() || rb.Len != 300 || rb.RKey != mr.RKey() {
		t.Fatalf("RemoteBuffer = %v", rb)
	}
}

func FuzzRemoteBuffer(f *testing.F) {
	b, _ := verbs.RemoteBuffer{Addr: 1 << 40, Len: 4096, RKey: 7}.MarshalBinary()
	f.Add(b)
	f.Add([]byte{})
	f.Add(b[:15])
	f.Fuzz(func(t *testing.T, in []byte) {
		var rb verbs.RemoteBuffer
		if err := rb.UnmarshalBinary(in); err != nil {
			if len(in) >= verbs.RemoteBufferSize {
				t.Fatalf("%d bytes refused: %v", len(in), err)
			}
			return
		}
		out, err := rb.MarshalBinary()
		if err != nil || !bytes.Equal(out, in[:verbs.RemoteBufferSize]) {
			t.Fatalf("round trip: % x -> %v -> % x", in, rb, out)
		}
	})
}
