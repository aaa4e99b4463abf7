package perf

import (
	"fmt"
	"io"
)

// This file writes perftest's --out_json report: the text perftest 25.01
// writes to --out_json_file (perftest_out.json by default) after each
// result row, one object with "test_info" (the header block's fields) and
// "results" (the row's figures). It is perftest's format, not tbrdma's
// --json rows (jsonout.BenchV1): keys with perftest's spelling, figures
// with two decimals in perftest's units.

// DefaultJSONFile is perftest's --out_json_file default, in the working
// directory.
const DefaultJSONFile = "perftest_out.json"

// testName is perftest's "test" value, e.g. "RDMA_Write_BW_Test".
func (t *TestInfo) testName() string {
	var s string
	switch t.Verb {
	case VerbSend:
		s = "Send_"
	case VerbWrite:
		s = "RDMA_Write_"
	case VerbRead:
		s = "RDMA_Read_"
	case VerbAtomic:
		s = "Atomic_" + t.AtomicType + "_"
	}
	switch {
	case t.BW && t.PostList > 1:
		s += "Post_List_BW_"
	case t.BW:
		s += "BW_"
	default:
		s += "Latency_"
	}
	return s + "Test"
}

// writeJSONInfo writes the "test_info" member, in perftest's order and
// with the fields PrintHeader prints.
func writeJSONInfo(w io.Writer, t *TestInfo) {
	fmt.Fprintf(w, "\"test_info\": {\n\"test\": %q,\n", t.testName())
	if t.Events {
		fmt.Fprintf(w, "\"Test with events\": \"Using_%s_comp0\",\n", t.Device)
	}
	fmt.Fprintf(w, "\"Dual_port\": \"OFF\",\n\"Device\": %q,\n", t.Device)
	fmt.Fprintf(w, "\"Number_of_qps\": %d,\n\"Transport_type\": \"IB\",\n", max(t.QPs, 1))
	fmt.Fprintf(w, "\"Connection_type\": \"RC\",\n\"Using_SRQ\": \"OFF\",\n")
	fmt.Fprintf(w, "\"PCIe_relax_order\": \"OFF\",\n\"ibv_wr_API\": \"OFF\",\n")
	if !t.Server {
		fmt.Fprintf(w, "\"TX_depth\": %d,\n", t.TxDepth)
	}
	if t.PostList > 1 {
		fmt.Fprintf(w, "\"Post_List\": %d,\n", t.PostList)
	}
	if t.Server && t.Verb == VerbSend {
		fmt.Fprintf(w, "\"RX_depth\": %d,\n", t.RxDepth)
	}
	if t.BW {
		fmt.Fprintf(w, "\"CQ_Moderation\": %d,\n", t.CQMod)
	}
	fmt.Fprintf(w, "\"Mtu\": %d,\n\"Link_type\": \"Ethernet\",\n\"GID_index\": %d,\n", t.MTU, t.GIDIndex)
	if t.Verb == VerbRead || t.Verb == VerbAtomic {
		fmt.Fprintf(w, "\"Outstand_reads\": %d,\n", t.OutReads)
	} else {
		fmt.Fprintf(w, "\"Max_inline_data\": %d,\n", t.Inline)
	}
	cm, ex := "OFF", "Ethernet"
	if t.RDMACM {
		cm, ex = "ON", "rdma_cm"
	}
	fmt.Fprintf(w, "\"rdma_cm_QPs\": %q,\n\"Use_ROCm_memory\": \"OFF\",\n\"Data_ex_method\": %q\n},\n", cm, ex)
}

// WriteLatJSON writes perftest's --out_json report of a latency row (in
// duration mode: MsgSize, n_iterations, t_avg and tps_average, as
// perftest's write_report_lat_duration_to_file).
func WriteLatJSON(w io.Writer, t *TestInfo, s LatStats) error {
	fmt.Fprintf(w, "{\n")
	writeJSONInfo(w, t)
	if s.Timed {
		_, err := fmt.Fprintf(w, "\"results\": {\n\"MsgSize\": %d,\n\"n_iterations\": %d,\n\"t_avg\": %.2f,\n\"tps_average\": %.2f\n}\n}\n",
			s.Size, s.Iters, s.Avg, s.TPS)
		return err
	}
	_, err := fmt.Fprintf(w, "\"results\": {\n\"MsgSize\": %d,\n\"n_iterations\": %d,\n\"t_min\": %.2f,\n\"t_max\": %.2f,\n"+
		"\"t_typical\": %.2f,\n\"t_avg\": %.2f,\n\"t_stdev\": %.2f,\n\"percentile_99\": %.2f,\n\"percentile_99.9\": %.2f\n}\n}\n",
		s.Size, s.Iters, s.Min, s.Max, s.Typical, s.Avg, s.Stdev, s.P99, s.P999)
	return err
}

// WriteBWJSON writes perftest's --out_json report of a bandwidth row
// (MiB/s, Mpps).
func WriteBWJSON(w io.Writer, t *TestInfo, r BWReport) error {
	fmt.Fprintf(w, "{\n")
	writeJSONInfo(w, t)
	_, err := fmt.Fprintf(w, "\"results\": {\n\"MsgSize\": %d,\n\"n_iterations\": %d,\n\"BW_peak\": %.2f,\n\"BW_average\": %.2f,\n\"MsgRate\": %.6f\n}\n}\n",
		r.Size, r.Iters, r.Peak, r.Average, r.MsgRate)
	return err
}
