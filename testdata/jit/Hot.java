// A JIT-hot method for sprof's JIT tests (cmd/sprof/record_jit_test.go).
// Run with -Xbatch, so that a method is compiled before the call that
// made it hot returns: spin and down are C2-compiled before "ready" is
// printed, and `jcmd PID Compiler.perfmap` then names them. It spins for
// args[0] seconds in spin, under args[1] calls of down (default 0), each
// made by compiled code: with -XX:CompileCommand=dontinline,Hot::* each
// is a frame of its own, and a walk reaches the thread's root only
// through all of them.
public class Hot {
    static long spin(long n) {
        long x = 0;
        for (long i = 0; i < n; i++) {
            x = (x * 31 + i) % 1000003;
        }
        return x;
    }

    static long down(int depth, long n) {
        if (depth == 0) {
            return spin(n);
        }
        return down(depth - 1, n) + depth;
    }

    public static void main(String[] args) {
        int depth = args.length > 1 ? Integer.parseInt(args[1]) : 0;
        long sink = 0;
        for (int i = 0; i < 30000; i++) {
            sink += down(depth, 100);
        }
        System.out.println("ready");
        System.out.flush();
        long end = System.nanoTime() + Long.parseLong(args[0]) * 1_000_000_000L;
        while (System.nanoTime() < end) {
            sink += down(depth, 1_000_000);
        }
        System.out.println(sink);
    }
}
