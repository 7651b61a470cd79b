// A JIT-hot function for sprof's JIT tests (cmd/sprof/record_jit_test.go):
// hotLoop is optimized by TurboFan before "ready" is printed, then the
// program spins in it for argv[2] seconds of CPU time. Run with --allow-natives-syntax
// and --perf-basic-prof or --perf-prof.
function hotLoop(n) {
  let x = 0;
  for (let i = 0; i < n; i++) x = (x * 31 + i) % 1000003;
  return x;
}

// Type feedback from full-length runs first, so that the optimized code
// is not thrown away (deoptimized) when the long runs begin.
%PrepareFunctionForOptimization(hotLoop);
let sink = 0;
for (let k = 0; k < 3; k++) sink += hotLoop(1e5);
%OptimizeFunctionOnNextCall(hotLoop);
sink += hotLoop(10);
process.stdout.write("ready\n");
// CPU seconds, not wall seconds: on a loaded host the work is the same.
const cpu = Number(process.argv[2] || 30) * 1e6;
const from = process.cpuUsage();
while (process.cpuUsage(from).user < cpu) sink += hotLoop(1e7);
console.log(sink);
