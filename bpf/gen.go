package bpf

// clang-22 warns about libbpf 1.1's BPF_CORE_READ on const-qualified pt_regs
// casts (arm64); the uninitialised variable is filled by bpf_core_read.
//go:generate go tool bpf2go -cc clang-22 -strip llvm-strip-22 -target amd64,arm64 -type sample_header -type sample_buf sprof sprof.bpf.c -- -mcpu=v3 -Wall -Werror -Wno-default-const-init-var-unsafe
//go:generate go tool bpf2go -cc clang-22 -strip llvm-strip-22 -target amd64,arm64 -type offcpu_header -type offcpu_buf offcpu offcpu.bpf.c -- -mcpu=v3 -Wall -Werror -Wno-default-const-init-var-unsafe
