package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"text/tabwriter"
)

// runReport prints a per-flow table of what a send sent and a recv received,
// beside what a token bucket of --rate and --burst should let through:
// burst + rate × (last − first send time) per flow. It returns no JSON.
func runReport(_ context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	sendFile := fs.String("send", "", "JSON output of psend send")
	recvFile := fs.String("recv", "", "JSON output of psend recv")
	port := fs.Int("port", 9000, "the receiving port to report on")
	rate := fs.Float64("rate", 0, "per-flow limit in packets/s (0: no expected column)")
	burst := fs.Float64("burst", 5, "token bucket burst in packets")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if *sendFile == "" || *recvFile == "" {
		return nil, badFlag("--send and --recv are required")
	}
	var s SendResult
	var r RecvResult
	for _, f := range []struct {
		name string
		v    any
	}{{*sendFile, &s}, {*recvFile, &r}} {
		b, err := os.ReadFile(f.name)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, f.v); err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	var ports []int
	for p := range s.Flows {
		n, _ := strconv.Atoi(p)
		ports = append(ports, n)
	}
	sort.Ints(ports)
	recv := r.Received[strconv.Itoa(*port)]
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "flow (UDP src port)\tsent\tsent pps\tarrived\texpected\tarrived/expected\t")
	var ts, ta, te float64
	for _, p := range ports {
		f := s.Flows[strconv.Itoa(p)]
		secs := float64(f.LastNs-f.FirstNs) / 1e9
		got := float64(recv[strconv.Itoa(p)])
		ts += float64(f.Sent)
		ta += got
		exp, ratio := "-", "-"
		if *rate > 0 {
			e := math.Min(float64(f.Sent), *burst+*rate*secs)
			te += e
			exp, ratio = fmt.Sprintf("%.0f", e), fmt.Sprintf("%.1f%%", 100*got/e)
		}
		pps := 0.0
		if secs > 0 {
			pps = float64(f.Sent-1) / secs
		}
		fmt.Fprintf(tw, "%d\t%d\t%.0f\t%.0f\t%s\t%s\t\n", p, f.Sent, pps, got, exp, ratio)
	}
	exp, ratio := "-", "-"
	if *rate > 0 && te > 0 {
		exp, ratio = fmt.Sprintf("%.0f", te), fmt.Sprintf("%.1f%%", 100*ta/te)
	}
	fmt.Fprintf(tw, "total\t%.0f\t\t%.0f\t%s\t%s\t\n", ts, ta, exp, ratio)
	return nil, tw.Flush()
}
