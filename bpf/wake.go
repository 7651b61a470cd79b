package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// The ring is drained in two ways, both triggered by the program's two
// wakeups (see wakeup in sprof.bpf.c), never by a timer and never per
// sample. When the ring passes a quarter full, Ready receives and the
// caller drains with Read: one copy, out of ring memory that the caches
// still hold. When it passes half full, the caller was busy elsewhere (on
// a new binary, in a long drain, or starved on an overloaded host): a
// goroutine of the Sampler's own moves the records into the backlog,
// user-space memory that Read hands out first, so a slow caller costs
// memory rather than samples. The ring itself can then be sized for the
// caches instead of for the caller's worst pause (DefaultRingBufferSize);
// only the waiting goroutine's own wakeup latency is left to its second
// half.

// waiter is the goroutine that sleeps until the program wakes it.
type waiter struct {
	epoll int // the ring's fd, edge-triggered, and stop
	stop  int // eventfd that ends the goroutine
	done  chan struct{}
}

// startWaiter registers the ring's fd edge-triggered: epoll then reports
// each wakeup the program asks for once, while level-triggered it would
// report the ring readable as long as a single record waits. A wakeup that
// comes while the goroutine is busy stays queued for its next epoll_wait.
func (s *Sampler) startWaiter() error {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("epoll_create1: %w", err)
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(ep)
		return fmt.Errorf("eventfd: %w", err)
	}
	w := &waiter{epoll: ep, stop: stop, done: make(chan struct{})}
	for _, r := range []struct {
		fd     int
		events uint32
	}{{s.objs.Samples.FD(), unix.EPOLLIN | unix.EPOLLET}, {stop, unix.EPOLLIN}} {
		ev := unix.EpollEvent{Events: r.events, Fd: int32(r.fd)}
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, r.fd, &ev); err != nil {
			unix.Close(ep)
			unix.Close(stop)
			return fmt.Errorf("epoll_ctl add fd %d: %w", r.fd, err)
		}
	}
	s.waiter = w
	go s.wait(w)
	return nil
}

// wait runs until stopWaiter: after each wakeup it spills the ring into the
// backlog if it is half full (and there is a backlog), then tells Ready's
// receiver to drain.
func (s *Sampler) wait(w *waiter) {
	defer close(w.done)
	events := make([]unix.EpollEvent, 2)
	for {
		n, err := unix.EpollWait(w.epoll, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			s.setWaitErr(fmt.Errorf("wait for the BPF ring: %w", err))
			return
		}
		for _, ev := range events[:n] {
			if int(ev.Fd) == w.stop {
				return
			}
		}
		if s.backlog.max > 0 && s.reader.AvailableBytes() >= s.ringSize/2 {
			s.spill()
		}
		select {
		case s.ready <- struct{}{}:
		default: // a wakeup is pending already
		}
	}
}

func (s *Sampler) stopWaiter() error {
	w := s.waiter
	if w == nil {
		return nil
	}
	s.waiter = nil
	var one [8]byte
	one[0] = 1 // the eventfd counter is a native-endian u64; 1 is nonzero either way
	if _, err := unix.Write(w.stop, one[:]); err != nil {
		return fmt.Errorf("stop the ring waiter: %w", err)
	}
	<-w.done
	return errors.Join(unix.Close(w.epoll), unix.Close(w.stop))
}

func (s *Sampler) setWaitErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waitErr == nil {
		s.waitErr = err
	}
}

// backlog holds records spilled out of the ring, each as a u32 length, four
// bytes of padding and the record padded to 8 bytes, so that every record
// starts 8-byte aligned as in the ring (decode then need not copy frames).
type backlog struct {
	buf     []byte
	off     int // buf[off:] is not read yet
	max     int // bytes; records beyond are dropped and counted
	lost    atomic.Uint64
	spilled atomic.Uint64 // records ever put in
}

const backlogHeader = 8

// keepBacklogCap is the largest buffer kept for reuse once read out; a
// bigger one, grown in a long pause, goes back to the garbage collector.
const keepBacklogCap = 4 << 20

// spill moves the records in the ring into the backlog.
func (s *Sampler) spill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := drainRing(s.reader, &s.rec, func(raw []byte) error {
		s.backlog.add(raw)
		return nil
	})
	if err != nil && s.waitErr == nil {
		s.waitErr = fmt.Errorf("spill into the backlog: %w", err)
	}
}

// ringReader is the part of a ringbuf.Reader that drainRing uses.
type ringReader interface {
	ReadInto(*ringbuf.Record) error
}

// ringRecordHeader is the length word and page offset that precede each
// record in a BPF ring buffer (the kernel's BPF_RINGBUF_HDR_SZ); a
// record's data is padded to 8 bytes.
const ringRecordHeader = 8

// drainRing hands fn the records that were in the ring when it read the
// first, and no more: on a host where the programs write records faster
// than fn handles them, a loop until the ring is empty would never end,
// and its caller, holding the Sampler's lock, would not see the
// recording's end, a signal or its own timer again. The records written
// meanwhile wait for the next call; the ring's wakeups and the backlog
// see to them. The reader must not block (a deadline in the past).
func drainRing(r ringReader, rec *ringbuf.Record, fn func(raw []byte) error) error {
	for left := -1; left != 0; { // left: bytes after the first record, once read
		err := r.ReadInto(rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read BPF ring buffer: %w", err)
		}
		if left < 0 {
			left = rec.Remaining
		} else {
			left = max(left-ringRecordHeader-(len(rec.RawSample)+7)&^7, 0)
		}
		if err := fn(rec.RawSample); err != nil {
			return err
		}
	}
	return nil
}

// add appends a record, or counts it lost if the backlog is full.
func (b *backlog) add(raw []byte) {
	padded := (len(raw) + 7) &^ 7
	if len(b.buf)+backlogHeader+padded > b.max {
		b.lost.Add(1)
		return
	}
	var zeros [backlogHeader]byte
	b.buf = binary.LittleEndian.AppendUint32(b.buf, uint32(len(raw)))
	b.buf = append(b.buf, zeros[:4]...)
	b.buf = append(b.buf, raw...)
	b.buf = append(b.buf, zeros[:padded-len(raw)]...)
	b.spilled.Add(1)
}

// read hands the backlog's records to fn, oldest first, decoded into s.
func (b *backlog) read(s *Sample, fn func(*Sample)) (int, error) {
	n := 0
	for b.off < len(b.buf) {
		h := b.buf[b.off:]
		size := int(binary.LittleEndian.Uint32(h))
		raw := h[backlogHeader : backlogHeader+size]
		b.off += backlogHeader + (size+7)&^7
		if err := s.decode(raw); err != nil {
			return n, err
		}
		fn(s)
		n++
	}
	b.off = 0
	b.buf = b.buf[:0]
	if cap(b.buf) > keepBacklogCap {
		b.buf = nil
	}
	return n, nil
}
