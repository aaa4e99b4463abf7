package verbs

import (
	"fmt"
	"strings"
)

// qpAttrNames names QPAttrMask's bits, in bit order.
var qpAttrNames = [...]struct {
	bit  QPAttrMask
	name string
}{
	{QPAttrState, "State"}, {QPAttrCurState, "CurState"}, {QPAttrEnSQDAsyncNotify, "EnSQDAsyncNotify"},
	{QPAttrAccessFlags, "AccessFlags"}, {QPAttrPKeyIndex, "PKeyIndex"}, {QPAttrPort, "Port"},
	{QPAttrQKey, "QKey"}, {QPAttrAV, "AV"}, {QPAttrPathMTU, "PathMTU"}, {QPAttrTimeout, "Timeout"},
	{QPAttrRetryCnt, "RetryCnt"}, {QPAttrRNRRetry, "RNRRetry"}, {QPAttrRQPSN, "RQPSN"},
	{QPAttrMaxQPRdAtomic, "MaxQPRdAtomic"}, {QPAttrAltPath, "AltPath"}, {QPAttrMinRNRTimer, "MinRNRTimer"},
	{QPAttrSQPSN, "SQPSN"}, {QPAttrMaxDestRdAtomic, "MaxDestRdAtomic"}, {QPAttrPathMigState, "PathMigState"},
	{QPAttrCap, "Cap"}, {QPAttrDestQPN, "DestQPN"}, {QPAttrSegmentSize, "SegmentSize"},
}

// String names the mask's bits as the constants do without their QPAttr
// prefix, joined by "|" ("State|PKeyIndex|Port"); bits without a name
// appear as one hex number at the end, and an empty mask is "0".
func (m QPAttrMask) String() string {
	if m == 0 {
		return "0"
	}
	var b strings.Builder
	for _, a := range qpAttrNames {
		if m&a.bit != 0 {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(a.name)
			m &^= a.bit
		}
	}
	if m != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		fmt.Fprintf(&b, "%#x", uint32(m))
	}
	return b.String()
}
