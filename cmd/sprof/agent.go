package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/sprof/sprof/agent"
	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/exporters/otlp"
	"github.com/sprof/sprof/exporters/pyroscope"
)

const agentUsage = `Usage: sprof agent [flags]

Profiles every process on the host for as long as it runs: every interval
(15 s) it sends one CPU profile per service to Grafana Pyroscope, to an
OpenTelemetry profiles endpoint (OTLP), and/or writes it to a directory as
pprof, at 19 Hz, a rate meant to be left on. A service is --service-name,
or else each process under its command name.

Examples:
  sudo sprof agent --pyroscope-url http://pyroscope:4040 --label env=prod
  sudo sprof agent --output-dir /var/lib/sprof --keep 240 --metrics-addr 127.0.0.1:9465
  sudo sprof agent --pyroscope-url http://pyroscope:4040 --off-cpu  # also off_cpu:nanoseconds
  sudo env SPROF_PYROSCOPE_USER=123456 SPROF_PYROSCOPE_PASSWORD=glc_... \
    sprof agent --pyroscope-url https://profiles-prod-001.grafana.net
  sudo env OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer%20..." \
    sprof agent --otlp-endpoint https://collector:4317

Credentials never go on the command line, where every user can read them:
--auth-file names a file of user=, password= or token= lines (or holding
the bearer token alone); without it SPROF_PYROSCOPE_USER,
SPROF_PYROSCOPE_PASSWORD or SPROF_PYROSCOPE_TOKEN are read.

Stacks are unwound as by record: frame pointers where code keeps them,
else a copy of the user stack (--stack-copy) unwound with each binary's
.sframe or .eh_frame, so programs built without frame pointers show their
callers down to main. Frames are named from each binary's debug info, converted once per binary
into a GSYM file in --cache-dir that later runs map in a millisecond;
--symbol-cache bounds the symbol tables kept in memory.

SIGTERM or Ctrl-C sends the interval under way and what is still queued,
oldest first, for up to --flush-timeout and exits; intervals it could not
send are written to --output-dir/unsent-pyroscope (or unsent-otlp) when
--output-dir is set. SIGHUP re-reads --auth-file and re-creates
--output-dir. deploy/ has a systemd unit and a Kubernetes DaemonSet.
`

// agentOptions is the parsed command line of `sprof agent`.
type agentOptions struct {
	frequency   int
	interval    time.Duration
	serviceName string
	processRoot exporters.ProcessRoot
	pyroscope   *pyroscope.Config
	otlpFlags   otlpFlags
	otlp        *otlp.Config
	host        string
	authFile    string
	outputDir   string
	keep        int
	queue       int
	// ingestionRate and ingestionBurst are what the requests are paced
	// to: bytes per second (0 for no pacing) and the most one may cost.
	ingestionRate, ingestionBurst int
	metricsAddr                   string
	flushTimeout                  time.Duration
	memoryLimit                   int
	sampling                      samplingFlags
	symbolizer                    symbolizerFlags
}

// secretFlags are the flags people try for credentials. They exist, hidden,
// to be refused with a pointer to the safe ways instead of pflag's bare
// "unknown flag".
func secretFlags() []string {
	return []string{"token", "bearer-token", "password", "basic-auth-password", "pyroscope-token", "pyroscope-password"}
}

func parseAgent(e *env, args []string) (*agentOptions, error) {
	o := &agentOptions{interval: agent.DefaultInterval, flushTimeout: agent.DefaultFlushTimeout}
	host, _ := os.Hostname()
	fs := newFlagSet(e, "agent", agentUsage)
	o.frequency = 19
	fs.VarP((*frequencyValue)(&o.frequency), "frequency", "F", "samples per second on each CPU")
	fs.Var((*durationValue)(&o.interval), "interval", "time one profile covers (at least 1s)")
	fs.StringVar(&o.serviceName, "service-name", "", "file every profile under this service; default: one service per process, named after its command")
	processRoot := fs.String("process-root", "auto", processRootHelp+"; auto = comm with --service-name, else none")
	url := fs.String("pyroscope-url", "", "Pyroscope server to push to, e.g. http://pyroscope:4040")
	api := fs.String("pyroscope-api", string(pyroscope.Push), "push (push.v1.PusherService/Push) or ingest (the legacy /ingest)")
	tenant := fs.String("tenant-id", "", "X-Scope-OrgID for a multi-tenant Pyroscope")
	fs.StringVar(&o.authFile, "auth-file", "", "file with the Pyroscope credentials (re-read on SIGHUP)")
	labels := fs.StringArray("label", nil, "series label k=v for every profile (repeatable)")
	fs.StringVar(&host, "host", host, "value of the host label (Pyroscope) and of host.name (OTLP); empty for none")
	o.otlpFlags.add(fs)
	fs.StringVar(&o.outputDir, "output-dir", "", "also write every profile to this directory as TIME_SERVICE.pb.gz, or TIME_SERVICE_CONTAINER.pb.gz with the short container ID")
	fs.IntVar(&o.keep, "keep", agent.DefaultKeep, "intervals of files to keep in --output-dir")
	fs.IntVar(&o.queue, "queue", agent.DefaultQueue, "intervals to hold while a destination is unreachable; the oldest go first (to --output-dir/unsent-*)")
	limits := pyroscope.DefaultLimits()
	o.ingestionRate, o.ingestionBurst = int(limits.IngestionRate), limits.IngestionBurst
	fs.Var((*sizeValue)(&o.ingestionRate), "ingestion-rate-limit", "ingestion rate limit of the server's tenant, bytes per second (Pyroscope: -distributor.ingestion-rate-limit-mb): requests to Pyroscope and OTLP are paced to stay under it, since the server refuses profiles past it; 0 = no pacing")
	fs.Var((*sizeValue)(&o.ingestionBurst), "ingestion-burst", "ingestion burst of the server's tenant (Pyroscope: -distributor.ingestion-burst-size-mb): no request costs more; larger profiles are split")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve the agent's Prometheus metrics at this address (e.g. 127.0.0.1:9465), GET /metrics")
	fs.Var((*durationValue)(&o.flushTimeout), "flush-timeout", "how long to try sending queued intervals at exit; the rest go to --output-dir/unsent-* if set")
	o.sampling.add(fs, agent.DefaultUnwindCache, "also record where threads wait off the CPU: a second profile type per service, off_cpu:nanoseconds (Pyroscope), an off_cpu/nanoseconds profile (OTLP)")
	symbolCache := sizeValue(agent.DefaultSymbolCache)
	fs.Var(&symbolCache, "symbol-cache", "memory for symbol tables (e.g. 64M): tables unused for a whole interval are dropped, and the least recently used when over it; with gsym, half for GSYM files, half for ELF fallbacks")
	o.memoryLimit = agent.DefaultMemoryLimit
	fs.Var((*sizeValue)(&o.memoryLimit), "memory-limit", "soft limit of the Go heap and runtime, which the garbage collector works to stay under (GOMEMLIMIT, which wins when set); 0 = none")
	o.symbolizer.add(fs)
	for _, name := range secretFlags() {
		fs.String(name, "", "")
		fs.MarkHidden(name)
	}
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	for _, name := range secretFlags() {
		if fs.Changed(name) {
			return nil, usagef("--%s: secrets on the command line are visible to every user in ps; use --auth-file or %s / %s",
				name, agent.EnvToken, agent.EnvPassword)
		}
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q; sprof agent profiles every process and takes no command", fs.Arg(0))
	}
	if err := checkFrequency(o.frequency); err != nil {
		return nil, err
	}
	if o.interval < time.Second {
		return nil, usagef("--interval %v: must be at least 1s", o.interval)
	}
	if err := o.sampling.check(fs); err != nil {
		return nil, err
	}
	if symbolCache < 1<<20 {
		return nil, usagef("--symbol-cache %d: give at least 1M", symbolCache)
	}
	o.symbolizer.cacheBytes = int64(symbolCache)
	if err := o.symbolizer.check(); err != nil {
		return nil, err
	}
	if o.ingestionBurst < 64<<10 {
		return nil, usagef("--ingestion-burst %d: give at least 64K, the largest profile must fit", o.ingestionBurst)
	}
	if o.keep < 1 || o.queue < 1 {
		return nil, usagef("--keep %d, --queue %d: both must be at least 1", o.keep, o.queue)
	}
	if *url == "" && o.otlpFlags.endpoint == "" && o.outputDir == "" {
		return nil, usagef("profiles must go somewhere: give --pyroscope-url, --otlp-endpoint, --output-dir, or several")
	}
	var err error
	if o.otlp, err = o.otlpFlags.config(os.Getenv); err != nil {
		return nil, err
	}
	o.host = host
	if *processRoot == "auto" {
		if o.serviceName != "" {
			o.processRoot = exporters.CommRoot
		}
	} else if o.processRoot, err = exporters.ParseProcessRoot(*processRoot); err != nil {
		return nil, usagef("--process-root: %v", err)
	}
	if *url != "" {
		cfg := &pyroscope.Config{URL: *url, Host: host, TenantID: *tenant, ServiceName: o.serviceName, ProcessRoot: o.processRoot}
		if cfg.API, err = pyroscope.ParseAPI(*api); err != nil {
			return nil, usagef("--pyroscope-api: %v", err)
		}
		if cfg.Labels, err = parseLabels(*labels); err != nil {
			return nil, usagef("--label: %v", err)
		}
		// The client checks the URL and the labels as the server would.
		if _, err := pyroscope.New(*cfg); err != nil {
			return nil, &usageError{err.Error()}
		}
		o.pyroscope = cfg
	} else if len(*labels) > 0 || *tenant != "" || o.authFile != "" {
		return nil, usagef("--label, --tenant-id and --auth-file are for Pyroscope; give --pyroscope-url too")
	}
	return o, nil
}

// pacing is the agent's IngestionRate: --ingestion-rate-limit, or -1
// for none.
func (o *agentOptions) pacing() float64 {
	if o.ingestionRate == 0 {
		return -1
	}
	return float64(o.ingestionRate)
}

// parseLabels reads k=v pairs.
func parseLabels(pairs []string) (map[string]string, error) {
	labels := map[string]string{}
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not name=value", kv)
		}
		if _, dup := labels[k]; dup {
			return nil, fmt.Errorf("%q given twice", k)
		}
		labels[k] = v
	}
	return labels, nil
}

func runAgent(e *env, args []string) error {
	o, err := parseAgent(e, args)
	if err != nil {
		return err
	}
	credentials := func() (agent.Credentials, error) { return agent.LoadCredentials(o.authFile, os.Getenv) }
	if _, err := credentials(); err != nil {
		return err
	}
	var metrics net.Listener
	if o.metricsAddr != "" {
		if metrics, err = net.Listen("tcp", o.metricsAddr); err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		defer metrics.Close()
	}
	if o.memoryLimit > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(int64(o.memoryLimit))
	}
	cfg := o.sampling.config(o.frequency)
	cfg.Symbolizer = o.symbolizer.newSymbolizer(e, "agent")
	cfg.UnwindStore = o.symbolizer.unwindStore(e, "agent")
	rec, err := agent.OpenBPF(cfg)
	if err != nil {
		return err
	}
	defer rec.Close()
	log := slog.New(slog.NewTextHandler(e.stderr, nil))
	if rec.KernelErr != nil {
		log.Warn("kernel frames stay unnamed", "err", rec.KernelErr)
	}
	if rec.Limits != "" {
		log.Info("older kernel", "limits", rec.Limits)
	}
	if rec.TablesErr != nil {
		log.Warn(tablesFallback, "err", rec.TablesErr)
	}
	acfg := agent.Config{
		Interval: o.interval, ServiceName: o.serviceName, ProcessRoot: o.processRoot,
		Pyroscope: o.pyroscope, OTLP: o.otlp, Host: o.host, Queue: o.queue, FlushTimeout: o.flushTimeout,
		IngestionRate: o.pacing(), IngestionBurst: o.ingestionBurst,
		OutputDir: o.outputDir, Keep: o.keep, Metrics: metrics, Log: log, DebugUnwind: o.sampling.debugUnwind,
	}
	if o.pyroscope != nil {
		acfg.Credentials = credentials
	}
	a, err := agent.New(rec, acfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer func() {
		signal.Stop(hup)
		close(hup)
	}()
	go func() {
		for range hup {
			a.Reload()
		}
	}()
	log.Info("profiling every process", "hz", o.frequency, "interval", o.interval, "to", destinations(o))
	return a.Run(ctx)
}

// destinations says in words where profiles go.
func destinations(o *agentOptions) string {
	var to []string
	if o.pyroscope != nil {
		to = append(to, o.pyroscope.URL)
	}
	if o.otlp != nil {
		to = append(to, o.otlp.Endpoint+" (OTLP "+string(o.otlp.Protocol)+")")
	}
	if o.outputDir != "" {
		to = append(to, o.outputDir)
	}
	return strings.Join(to, " and ")
}
