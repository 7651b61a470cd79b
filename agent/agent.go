package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sprof/sprof/collector"
	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/exporters/otlp"
	"github.com/sprof/sprof/exporters/pyroscope"
	"github.com/sprof/sprof/stacks"
	"github.com/sprof/sprof/symbolize"
)

// Defaults of Config's zero fields.
const (
	DefaultInterval     = 15 * time.Second
	DefaultQueue        = 20 // intervals: five minutes of outage at 15 s
	DefaultKeep         = 240
	DefaultRetryBackoff = time.Second
	DefaultFlushTimeout = 10 * time.Second
)

// Recorder is where the agent's profiles come from: the BPF sampler with
// its collector (OpenBPF) or, in tests, a fake.
type Recorder interface {
	// Drain moves the samples waiting now into the current interval.
	Drain() error
	// Cut returns the profile of the interval that ends now and starts
	// the next one (see collector.Collector.Cut).
	Cut() (*stacks.Profile, collector.Stats)
	// SymbolizerStats reports the symbolizer's work, for the metrics.
	SymbolizerStats() SymbolizerStats
}

// SymbolizerStats is what a symbolizer reports of its work; each part is
// nil when the symbolizer does not count it, so the metrics leave it out
// rather than show zeros.
type SymbolizerStats struct {
	// Cache is the symbolizer's cache of tables in memory.
	Cache *symbolize.CacheStats
	// GSYM counts the binaries a GSYM symbolizer converted, found
	// converted in its cache directory, or could not convert.
	GSYM *symbolize.GSYMStats
}

// Config says how often to profile and where profiles go. At least one of
// Pyroscope, OTLP and OutputDir must be set.
type Config struct {
	// Interval is the time one profile covers; DefaultInterval if zero.
	Interval time.Duration
	// DrainEvery is how often samples are moved out of the kernel's
	// ring; collector.DefaultInterval if zero.
	DrainEvery time.Duration
	// ServiceName files every profile under one service; when empty each
	// process is a service named after its command (pyroscope.Services).
	// ProcRoot ("" means /proc) is where a process's command name is read
	// when its main thread had no sample.
	ServiceName string
	ProcRoot    string
	// ProcessRoot adds a root frame naming each sample's process, which
	// tells programs apart inside one service.
	ProcessRoot exporters.ProcessRoot
	// Pyroscope, when not nil, is where profiles are pushed. Its
	// ServiceName and credentials are set by the agent for every push;
	// its Host and Labels label every series.
	Pyroscope *pyroscope.Config
	// OTLP, when not nil, is an OpenTelemetry profiles endpoint profiles
	// are sent to as well, one resource per series; Host is their
	// host.name.
	OTLP *otlp.Config
	Host string
	// Credentials, when not nil, returns the credentials to push with. It
	// is called at the start and on every Reload, so that a rotated
	// secret is picked up without a restart.
	Credentials func() (Credentials, error)
	// Queue is how many intervals wait while Pyroscope is unreachable
	// before the oldest is dropped; DefaultQueue if zero.
	Queue int
	// RetryBackoff is the first wait after a failed push, doubled after
	// every failure up to Interval; DefaultRetryBackoff if zero. The
	// Pyroscope client's own retries come first.
	RetryBackoff time.Duration
	// FlushTimeout bounds the pushes at exit; DefaultFlushTimeout if zero.
	FlushTimeout time.Duration
	// OutputDir, when not empty, receives each interval's profiles as
	// pprof files, of which the newest Keep intervals (DefaultKeep if
	// zero) are kept.
	OutputDir string
	Keep      int
	// Metrics, when not nil, serves the agent's metrics (GET /metrics)
	// until Run returns, which closes it.
	Metrics net.Listener
	// Log receives what goes wrong and what recovers; nil discards it.
	Log *slog.Logger
}

// Agent profiles continuously. Make one with New and call Run.
type Agent struct {
	cfg     Config
	rec     Recorder
	log     *slog.Logger
	metrics metrics
	pusher  *pusher      // nil without Pyroscope
	otlp    *otlp.Client // nil without OTLP
	out     *outputDir
	// deliveries are the destinations profiles are sent to, each with its
	// own queue.
	deliveries []*delivery
	reload     chan struct{}
	// sidebandWarned is set once the lack of a side band was logged.
	sidebandWarned bool
}

// New checks cfg and returns an agent recording from rec. Nothing runs
// until Run.
func New(rec Recorder, cfg Config) (*Agent, error) {
	if cfg.Pyroscope == nil && cfg.OTLP == nil && cfg.OutputDir == "" {
		return nil, errors.New("agent: profiles must go somewhere: set Pyroscope, OTLP or OutputDir")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.DrainEvery <= 0 {
		cfg.DrainEvery = collector.DefaultInterval
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if cfg.FlushTimeout <= 0 {
		cfg.FlushTimeout = DefaultFlushTimeout
	}
	if cfg.Keep <= 0 {
		cfg.Keep = DefaultKeep
	}
	a := &Agent{cfg: cfg, rec: rec, log: cfg.Log, reload: make(chan struct{}, 1)}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Pyroscope != nil {
		pc := *cfg.Pyroscope
		pc.ProcessRoot = cfg.ProcessRoot
		p, err := newPusher(pc, &a.metrics.bytesSent)
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		a.pusher = p
	}
	if err := a.loadCredentials(); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if cfg.OutputDir != "" {
		a.out = &outputDir{dir: cfg.OutputDir, keep: cfg.Keep, opts: exporters.Options{ProcessRoot: cfg.ProcessRoot}}
		if err := a.out.open(); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	if a.pusher != nil {
		a.deliveries = append(a.deliveries, a.newDelivery("pyroscope", a.pusher, &a.metrics))
	}
	if cfg.OTLP != nil {
		c, err := otlp.New(*cfg.OTLP)
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		a.otlp = c
		// The queue gauges are Pyroscope's when both are configured.
		gauges := &a.metrics
		if a.pusher != nil {
			gauges = nil
		}
		a.deliveries = append(a.deliveries, a.newDelivery("otlp", &otlpSender{client: c, host: cfg.Host, log: a.log}, gauges))
	}
	return a, nil
}

func (a *Agent) loadCredentials() error {
	if a.cfg.Credentials == nil || a.pusher == nil {
		return nil
	}
	c, err := a.cfg.Credentials()
	if err != nil {
		return err
	}
	a.pusher.setCredentials(c)
	return nil
}

// Reload asks Run to re-read the credentials and re-create the output
// directory, as on SIGHUP. It does not wait.
func (a *Agent) Reload() {
	select {
	case a.reload <- struct{}{}:
	default: // one is pending already
	}
}

// Run profiles until ctx is done, then cuts the interval under way,
// writes it and pushes what is queued within FlushTimeout. It returns an
// error only if the metrics endpoint fails; everything else is counted and
// logged, and profiling goes on.
func (a *Agent) Run(ctx context.Context) error {
	serveErr := make(chan error, 1)
	if a.cfg.Metrics != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", a.MetricsHandler())
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { serveErr <- srv.Serve(a.cfg.Metrics) }()
		defer srv.Close()
	}
	if a.otlp != nil {
		defer a.otlp.Close()
	}
	pushCtx, stopPushing := context.WithCancel(context.Background())
	defer stopPushing()
	var delivering sync.WaitGroup
	for _, d := range a.deliveries {
		delivering.Go(func() { d.loop(pushCtx) })
	}

	drain := time.NewTicker(a.cfg.DrainEvery)
	defer drain.Stop()
	cut := time.NewTicker(a.cfg.Interval)
	defer cut.Stop()
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err = <-serveErr:
			err = fmt.Errorf("agent: metrics endpoint: %w", err)
			break loop
		case <-drain.C:
			if err := a.rec.Drain(); err != nil {
				a.log.Debug("drain", "err", err) // counted in the interval's Stats
			}
		case <-cut.C:
			a.cutInterval()
		case <-a.reload:
			a.doReload()
		}
	}
	a.cutInterval()
	a.flush(&delivering, stopPushing)
	return err
}

func (a *Agent) doReload() {
	if err := a.loadCredentials(); err != nil {
		a.log.Error("reload credentials; keeping the old ones", "err", err)
	}
	if a.out != nil {
		if err := a.out.open(); err != nil {
			a.log.Error("reopen output", "err", err)
		}
	}
	a.log.Info("reloaded")
}

// cutInterval ends the interval: it writes the profiles and queues them
// for Pyroscope.
func (a *Agent) cutInterval() {
	p, st := a.rec.Cut()
	a.metrics.observe(st, p.Start.Add(p.Duration))
	if st.Errors > 0 {
		a.log.Warn("records skipped while draining", "count", st.Errors, "first", st.Err)
	}
	if st.Sideband != nil && !a.sidebandWarned {
		a.log.Warn("no process side band: processes that exit between drains may be unattributed", "err", st.Sideband)
		a.sidebandWarned = true
	}
	items := pyroscope.Split(p, pyroscope.Services(a.cfg.ServiceName, p.Samples, a.cfg.ProcRoot))
	a.log.Debug("interval", "start", p.Start, "samples", st.Samples, "lost", p.Lost, "series", len(items))
	if len(items) == 0 {
		return
	}
	if a.out != nil {
		n, errs := a.out.write(p.Start, items)
		a.metrics.filesWritten.Add(uint64(n))
		a.metrics.fileErrors.Add(uint64(len(items) - n))
		if errs != nil {
			a.log.Error("write profiles", "err", errors.Join(errs...))
		}
	}
	for _, d := range a.deliveries {
		d.add(items)
	}
}
