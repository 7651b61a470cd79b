package synth

import (
	"debug/elf"
	"path/filepath"
	"testing"

	"github.com/sprof/sprof/sframe"
)

// diffs counts, for one binary, how the synthesized table compares with
// the .sframe gas and ld wrote, PC by PC over every function of the
// latter.
type diffs struct {
	pcs       int // PCs compared
	equal     int
	outermost int // we say outermost, gas (V1/V2, which ignore .cfi_undefined) has a row
	flex      int // gas has a V3 FLEX rule, which we leave out
	pltGot    int // ld's .plt.got rows say sp+16; the stub is called, the CFA is sp+8
	missing   int // gas has a rule, we have none
	extra     int // we have a rule, gas none (before its first row)
	wrong     int
	// extraFuncs are our functions outside every gas FDE (crt objects
	// built without --gsframe, .plt.got, FLEX functions gas 2.44 skips).
	extraFuncs int
}

func compareWithGas(t *testing.T, bin string) diffs {
	t.Helper()
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	gas, err := sframe.FromELF(ef)
	if err != nil {
		t.Fatal(err)
	}
	ours, st, err := FromELF(ef)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Errors) != 0 {
		t.Errorf("%s: %v", bin, st.Errors)
	}
	var d diffs
	var pltGot [2]uint64
	if s := ef.Section(".plt.got"); s != nil {
		pltGot = [2]uint64{s.Addr, s.Addr + s.Size}
	}
	for i := range gas.FDEs() {
		f := &gas.FDEs()[i]
		for pc := f.Start; pc < f.End(); pc++ {
			d.pcs++
			g, gok := gas.Lookup(pc)
			o, ook := ours.Lookup(pc)
			switch {
			case gok && ook && sameRule(&g.Row, &o.Row):
				d.equal++
			case gok && ook && o.Row.Outermost() && gas.Header.Version < sframe.Version3:
				d.outermost++
			case gok && !ook && g.FDE.Type() == sframe.FDETypeFlex && gas.Header.Version == sframe.Version3:
				d.flex++
			case gok && ook && pc >= pltGot[0] && pc < pltGot[1] && g.Row.CFA.Off == 16 && o.Row.CFA.Off == 8:
				d.pltGot++
			case gok && !ook:
				d.missing++
				t.Errorf("%s: %#x: gas %s, we have no rule", bin, pc, gas.Describe(g))
			case !gok && ook:
				d.extra++
			case gok && ook:
				d.wrong++
				t.Errorf("%s: %#x: gas %s, we %s", bin, pc, gas.Describe(g), ours.Describe(o))
			}
		}
	}
	for i := range ours.FDEs() {
		f := &ours.FDEs()[i]
		if g, ok := gas.Lookup(f.Start); !ok || g.FDE.End() <= f.Start {
			if _, ok := gasFDEAt(gas, f.Start); !ok {
				d.extraFuncs++
			}
		}
	}
	return d
}

// gasFDEAt returns the gas FDE that covers pc.
func gasFDEAt(t *sframe.Table, pc uint64) (*sframe.FDE, bool) {
	for i := range t.FDEs() {
		if f := &t.FDEs()[i]; pc >= f.Start && pc < f.End() {
			return f, true
		}
	}
	return nil, false
}

// TestGasOracle synthesizes the table of every fixture built with
// -Wa,--gsframe from its .eh_frame and compares it, at every PC of every
// function of the .sframe that gas and ld wrote, with that section. The
// only differences allowed are the deliberate ones of diffs, and they are
// counted exactly.
func TestGasOracle(t *testing.T) {
	// want gives the expected differences; fixtures not named have none
	// (but the PCs compared, and the functions only we have, for crt
	// objects built without --gsframe).
	want := map[string]diffs{
		"asm-arm64-v1":   {outermost: 12},
		"asm-arm64-v2":   {outermost: 12},
		"asm-arm64be-v2": {outermost: 12},
		"chain-amd64-v2": {pltGot: 8},
		"chain-amd64-v3": {pltGot: 8},
		"flex-amd64-v3":  {flex: 14},
		"lua-amd64-v3":   {pltGot: 8},
	}
	bins, err := filepath.Glob("../../testdata/sframe/*-v[123]")
	if err != nil || len(bins) < 18 {
		t.Fatal(bins, err)
	}
	for _, bin := range bins {
		name := filepath.Base(bin)
		d := compareWithGas(t, bin)
		t.Logf("%s: %+v", name, d)
		w := want[name]
		w.pcs, w.extraFuncs = d.pcs, d.extraFuncs
		w.equal = d.pcs - w.outermost - w.flex - w.pltGot
		if d != w {
			t.Errorf("%s: %+v, want %+v", name, d, w)
		}
	}
}
