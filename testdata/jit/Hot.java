// A JIT-hot method for sprof's JIT tests (cmd/sprof/record_jit_test.go).
// Run with -Xbatch, so that a method is compiled before the call that
// made it hot returns: spin is C2-compiled before "ready" is printed, and
// `jcmd PID Compiler.perfmap` then names it. It spins for args[0] seconds.
public class Hot {
    static long spin(long n) {
        long x = 0;
        for (long i = 0; i < n; i++) {
            x = (x * 31 + i) % 1000003;
        }
        return x;
    }

    public static void main(String[] args) {
        long sink = 0;
        for (int i = 0; i < 30000; i++) {
            sink += spin(100);
        }
        System.out.println("ready");
        System.out.flush();
        long end = System.nanoTime() + Long.parseLong(args[0]) * 1_000_000_000L;
        while (System.nanoTime() < end) {
            sink += spin(1_000_000);
        }
        System.out.println(sink);
    }
}
