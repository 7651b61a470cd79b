/* syscalls: spends its time in the kernel, writing to /dev/null and asking
 * for its pid, for the number of seconds in argv[1] (default 2). */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 2;
	static char buf[1 << 16];
	int fd = open("/dev/null", O_WRONLY);
	struct timespec start, ts;
	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		for (int i = 0; i < 100; i++) {
			if (write(fd, buf, sizeof buf) < 0)
				return 1;
			syscall(SYS_getppid);
		}
		clock_gettime(CLOCK_MONOTONIC, &ts);
	} while (ts.tv_sec - start.tv_sec + (ts.tv_nsec - start.tv_nsec) / 1e9 < secs);
	return 0;
}
