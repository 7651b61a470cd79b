/*
 * Fixture for sprof's off-CPU profiling (x86-64). Built -O2
 * -fno-omit-frame-pointer -no-pie -pthread by scripts/build-bpf-fixtures.sh.
 *
 *   offcpu MODE ROUNDS WAIT_US
 *
 * After a line on stdin (or its end), a worker thread alternates ROUNDS times between a
 * spin of about 2 ms in chain A (chain_a -> spin_a) and a blocking wait of
 * about WAIT_US in chain B (chain_b -> wait_b), which in MODE is
 *
 *   nanosleep  a nanosleep
 *   futex      a FUTEX_WAIT on a lock word a helper thread holds
 *   pipe       a read from a pipe a helper thread writes to WAIT_US after
 *              the worker asked for it at the start of its spin
 *
 * then prints the wall time it spent in the waits and spins, measured with
 * CLOCK_MONOTONIC around them, the CPU time the thread used inside the
 * waits (CLOCK_THREAD_CPUTIME_ID: the kernel's account of the system calls
 * around the time off the CPU; on a slow or emulated CPU a sizeable part of
 * the wall time), and its thread id (run by root, the worker SCHED_FIFO):
 *
 *   tid=T wait_ns=W spin_ns=S wait_cpu_ns=C
 *
 * The system calls go through syscall(2), whose wrapper leaves the frame
 * pointer alone, so frame-pointer walks reach chain_b from every wait.
 *
 *   offcpu storm SECONDS [SLICE_MS]
 *
 * Two threads ping-pong one byte through two pipes for SECONDS (a decimal
 * number; 0: until SIGTERM or SIGINT, an hour at most), then the
 * program prints the round trips it made and the CPU time both threads
 * used (getrusage): round_trips=N cpu_ns=T. Each round trip is at least
 * two context switches when the threads share a CPU. With SLICE_MS, it
 * also counts the round trips of each SLICE_MS milliseconds and prints
 * them after that line, one line a slice, with the slice's start on
 * CLOCK_BOOTTIME (the clock of /proc/uptime), for a script that turns
 * something on and off during one long storm to compare the slices of
 * each period: slice_ns=B trips=N.
 *
 * Every mode but an endless storm ends on its own, and a test that dies closes its stdin, so
 * the fixture sets no PR_SET_PDEATHSIG: that fires when the thread that
 * forked it exits, and a Go test's threads do (a goroutine that ends
 * locked to its thread takes the thread with it).
 */
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))
#define KEEP() __asm__ volatile("" ::: "memory")

static const char *mode;
static long rounds, wait_us;
static int request[2], reply[2];
static atomic_int lock_word; /* 0 free, 1 held */
static atomic_int worker_ready, acquired;
static unsigned long long wait_ns, spin_ns, wait_cpu_ns;
volatile unsigned long sink;

static unsigned long long clock_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static unsigned long long now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

static void sleep_us(long us)
{
	struct timespec ts = {us / 1000000, us % 1000000 * 1000};

	syscall(SYS_nanosleep, &ts, NULL);
}

NOINLINE void spin_a(void)
{
	unsigned long long end = now_ns() + 2000000;

	while (now_ns() < end)
		sink++;
}

NOINLINE void chain_a(void)
{
	unsigned long long t0 = now_ns();

	/* Ask for the pipe's byte here, not in chain B: waking the helper
	 * may preempt this thread. */
	if (strcmp(mode, "pipe") == 0)
		syscall(SYS_write, request[1], "?", 1);
	spin_a();
	KEEP();
	spin_ns += now_ns() - t0;
}

NOINLINE void wait_b(void)
{
	char c;

	if (strcmp(mode, "nanosleep") == 0) {
		sleep_us(wait_us);
	} else if (strcmp(mode, "futex") == 0) {
		int free = 0;

		atomic_store(&worker_ready, 1);
		while (!atomic_compare_exchange_strong(&lock_word, &free, 1)) {
			syscall(SYS_futex, &lock_word, FUTEX_WAIT_PRIVATE, 1, NULL, NULL, 0);
			free = 0;
		}
		atomic_fetch_add(&acquired, 1);
		atomic_store(&lock_word, 0);
	} else {
		syscall(SYS_read, reply[0], &c, 1);
	}
	KEEP();
}

NOINLINE void chain_b(void)
{
	unsigned long long c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), t0 = now_ns();

	wait_b();
	KEEP();
	wait_ns += now_ns() - t0;
	wait_cpu_ns += clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
}

/* The futex holder: takes the lock, and once the worker is about to wait
 * for it, holds it for wait_us more, then lets the worker have it before
 * taking it again. The pipe helper: answers each request after wait_us.
 * Run by root, it is SCHED_FIFO as the worker is: on a loaded host an
 * ordinary thread often did not take the lock back within the worker's
 * 2 ms spin, and most rounds found it free, with no wait. */
static void *helper(void *arg)
{
	struct sched_param fifo = {.sched_priority = 1};
	char c;
	int seen = 0;

	(void)arg;
	pthread_setschedparam(pthread_self(), SCHED_FIFO, &fifo);
	for (;;) {
		if (strcmp(mode, "futex") == 0) {
			int free = 0;

			while (!atomic_compare_exchange_strong(&lock_word, &free, 1)) {
				free = 0;
				sleep_us(100);
			}
			while (!atomic_load(&worker_ready))
				sleep_us(100);
			atomic_store(&worker_ready, 0);
			sleep_us(wait_us);
			atomic_store(&lock_word, 0);
			syscall(SYS_futex, &lock_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
			while (atomic_load(&acquired) == seen)
				sleep_us(100);
			seen = atomic_load(&acquired);
		} else {
			if (syscall(SYS_read, request[0], &c, 1) != 1)
				return NULL;
			sleep_us(wait_us);
			syscall(SYS_write, reply[1], &c, 1);
		}
	}
}

static void *worker(void *arg)
{
	struct sched_param fifo = {.sched_priority = 1};

	(void)arg;
	/* Root runs the worker SCHED_FIFO (else at nice -10, below): no
	 * ordinary thread then preempts it inside the windows it times, where
	 * a preemption is time off the CPU that sprof records with the user
	 * pc alone (see bpf/offcpu.bpf.c), not in chain B. Its spins are 2 ms,
	 * well inside the kernel's real-time budget. */
	pthread_setschedparam(pthread_self(), SCHED_FIFO, &fifo);
	for (long i = 0; i < rounds; i++) {
		chain_a();
		KEEP();
		chain_b();
		KEEP();
	}
	printf("tid=%ld wait_ns=%llu spin_ns=%llu wait_cpu_ns=%llu\n", (long)syscall(SYS_gettid), wait_ns, spin_ns,
	       wait_cpu_ns);
	fflush(stdout);
	return NULL;
}

static volatile sig_atomic_t storm_stop;
static unsigned long long trips;

static void stop_storm(int sig)
{
	(void)sig;
	storm_stop = 1;
}

static void *pong(void *arg)
{
	char c;

	(void)arg;
	while (read(request[0], &c, 1) == 1)
		if (write(reply[1], &c, 1) != 1)
			break;
	return NULL;
}

static int storm(double seconds, long slice_ms)
{
	pthread_t t;
	struct rusage ru;
	struct sigaction stop = {.sa_handler = stop_storm, .sa_flags = SA_RESTART};
	char c = 'x';
	unsigned long long start = clock_ns(CLOCK_BOOTTIME), slice_ns = slice_ms * 1000000ULL;
	unsigned long long end = start + (unsigned long long)((seconds > 0 ? seconds : 3600) * 1e9);
	unsigned long long *slice = NULL;
	size_t slices = 0;

	if (slice_ms > 0) {
		slices = (end - start) / slice_ns + 1;
		slice = calloc(slices, sizeof(*slice));
		if (!slice)
			return 1;
	}
	sigaction(SIGTERM, &stop, NULL);
	sigaction(SIGINT, &stop, NULL);
	pthread_create(&t, NULL, pong, NULL);
	for (;;) {
		if (write(request[1], &c, 1) != 1 || read(reply[0], &c, 1) != 1)
			return 1;
		if (++trips & 63)
			continue;
		unsigned long long now = clock_ns(CLOCK_BOOTTIME);
		if (now >= end || storm_stop) {
			end = now;
			break;
		}
		if (slice)
			slice[(now - start) / slice_ns] += 64;
	}
	getrusage(RUSAGE_SELF, &ru);
	printf("round_trips=%llu cpu_ns=%llu\n", trips,
	       (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ULL + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ULL);
	for (size_t i = 0; slice && i < slices && start + i * slice_ns < end; i++)
		printf("slice_ns=%llu trips=%llu\n", start + i * slice_ns, slice[i]);
	return 0;
}

int main(int argc, char **argv)
{
	pthread_t h, w;
	char line[16];

	if (argc < 3) {
		fprintf(stderr, "usage: %s nanosleep|futex|pipe ROUNDS WAIT_US | storm SECONDS [SLICE_MS]\n", argv[0]);
		return 2;
	}
	mode = argv[1];
	if (pipe(request) || pipe(reply))
		return 1;
	/* Start at a line or at the end of stdin (under sprof record --). */
	if (!fgets(line, sizeof(line), stdin))
		line[0] = 0;
	if (strcmp(mode, "storm") == 0)
		return storm(atof(argv[2]), argc > 3 ? atol(argv[3]) : 0);
	if (argc < 4)
		return 2;
	rounds = atol(argv[2]);
	wait_us = atol(argv[3]);
	/* Root runs the threads at nice -10 (they inherit it), the worker
	 * SCHED_FIFO (worker): a loaded host's scheduler then preempts them
	 * less. Without the privilege they run as they are. */
	setpriority(PRIO_PROCESS, 0, -10);
	if (strcmp(mode, "nanosleep") != 0)
		pthread_create(&h, NULL, helper, NULL);
	pthread_create(&w, NULL, worker, NULL);
	pthread_join(w, NULL);
	return 0;
}
