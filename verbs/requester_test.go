package verbs

import (
	"fmt"
	"testing"

	"github.com/tbrdma/tbrdma/transport/wire"
)

func TestDataOpcode(t *testing.T) {
	tests := []struct {
		op          WROpcode
		first, last bool
		want        wire.Opcode
	}{
		{WRSend, true, true, wire.SendOnly},
		{WRSend, true, false, wire.SendFirst},
		{WRSend, false, false, wire.SendMiddle},
		{WRSend, false, true, wire.SendLast},
		{WRSendWithImm, true, true, wire.SendOnlyImm},
		{WRSendWithImm, true, false, wire.SendFirst},
		{WRSendWithImm, false, true, wire.SendLastImm},
		{WRSendWithInv, true, true, wire.SendOnlyInvalidate},
		{WRSendWithInv, false, false, wire.SendMiddle},
		{WRSendWithInv, false, true, wire.SendLastInvalidate},
		{WRRDMAWrite, true, true, wire.WriteOnly},
		{WRRDMAWrite, true, false, wire.WriteFirst},
		{WRRDMAWrite, false, false, wire.WriteMiddle},
		{WRRDMAWrite, false, true, wire.WriteLast},
		{WRRDMAWriteWithImm, true, true, wire.WriteOnlyImm},
		{WRRDMAWriteWithImm, false, false, wire.WriteMiddle},
		{WRRDMAWriteWithImm, false, true, wire.WriteLastImm},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/first=%v/last=%v", tt.op, tt.first, tt.last), func(t *testing.T) {
			if got := dataOpcode(tt.op, tt.first, tt.last); got != tt.want {
				t.Errorf("dataOpcode = %v, want %v", got, tt.want)
			}
		})
	}
}
