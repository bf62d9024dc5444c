package fastpath

// The program's object and its Go bindings are generated and committed, so
// that building needs no clang; TestGeneratedUpToDate fails when they drift
// from bpf/fastpath.c and its headers (bpf/*.h). Regenerate with:
// go generate ./internal/fastpath
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -target bpfel -tags linux -type rule_entry -type cfg -type flow_key -type flow_state -type rule_counters -type lpm_key -type action -type algo -type key_mode -type over -type counter -type lpm_flag -type lock_state -type lock_word -type total fastpath bpf/fastpath.c -- -I/usr/include/x86_64-linux-gnu -mcpu=v3 -Wall -Werror
