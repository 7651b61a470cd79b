module github.com/sprof/sprof

go 1.26.8

require (
	connectrpc.com/connect v1.21.1
	github.com/cilium/ebpf v0.22.0
	github.com/google/pprof v0.0.0-20260906184651-6331bc6350fe
	github.com/grafana/pyroscope/api v1.6.0
	github.com/ianlancetaylor/demangle v0.0.0-20260724033716-83e58baca724
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3
	github.com/spf13/pflag v1.0.10
	github.com/ulikunitz/xz v0.5.17
	go.opentelemetry.io/proto/otlp v1.10.0
	go.opentelemetry.io/proto/otlp/collector/profiles/v1development v0.3.0
	go.opentelemetry.io/proto/otlp/profiles/v1development v0.3.0
	golang.org/x/sys v0.49.0
	google.golang.org/grpc v1.82.1
	google.golang.org/protobuf v1.36.11
)

require (
	github.com/google/gnostic v0.7.1 // indirect
	github.com/google/gnostic-models v0.7.0 // indirect
	github.com/gorilla/mux v1.8.1 // indirect
	github.com/grpc-ecosystem/grpc-gateway/v2 v2.29.0 // indirect
	github.com/planetscale/vtprotobuf v0.6.1-0.20250313105119-ba97887b0a25 // indirect
	go.yaml.in/yaml/v3 v3.0.4 // indirect
	golang.org/x/net v0.56.0 // indirect
	golang.org/x/text v0.39.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260504160031-60b97b32f348 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260427160629-7cedc36a6bc4 // indirect
)

tool github.com/cilium/ebpf/cmd/bpf2go
