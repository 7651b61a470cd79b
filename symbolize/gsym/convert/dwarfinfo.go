package convert

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
)

// dwarfData is the DWARF of one binary as the converter reads it: the raw
// sections, and the units of .debug_info with their abbreviation tables
// decoded once. It is read-only once built, so workers share it.
//
// The converter reads a dozen attributes of a few tags and skips
// everything else, so DIEs are walked in place: skipping an attribute is a
// precomputed byte count or a length read, and nothing is allocated per
// DIE. A general reader (debug/dwarf) decodes every attribute of every DIE
// into allocated fields, which made it most of the conversion's time.
type dwarfData struct {
	info, abbrev, str, lineStr, strOffsets, addr, ranges, rnglists, line []byte
	order                                                                binary.ByteOrder
	units                                                                []unitHeader // by offset
}

// unitHeader is a unit of .debug_info.
type unitHeader struct {
	off      uint64 // of the unit header
	dieOff   uint64 // of the unit DIE
	end      uint64
	version  int
	addrSize int
	dwarf64  bool
	tag      uint64 // of the unit DIE
	abbrevs  *abbrevTable
	// DWARF 5 bases, from the unit DIE (0 before version 5, as for
	// debug/dwarf and LLVM).
	addrBase, strOffsetsBase, rnglistsBase uint64
}

func (u *unitHeader) offSize() int {
	if u.dwarf64 {
		return 8
	}
	return 4
}

// DWARF tags, attributes and forms the converter knows.
const (
	tagClassType         = 0x02
	tagLexicalBlock      = 0x0b
	tagCompileUnit       = 0x11
	tagStructType        = 0x13
	tagUnionType         = 0x17
	tagInlinedSubroutine = 0x1d
	tagSubprogram        = 0x2e
	tagNamespace         = 0x39
	tagPartialUnit       = 0x3c

	atName           = 0x03
	atStmtList       = 0x10
	atLowPC          = 0x11
	atHighPC         = 0x12
	atLanguage       = 0x13
	atCompDir        = 0x1b
	atAbstractOrigin = 0x31
	atDeclFile       = 0x3a
	atDeclLine       = 0x3b
	atSpecification  = 0x47
	atEntryPC        = 0x52
	atRanges         = 0x55
	atCallFile       = 0x58
	atCallLine       = 0x59
	atLinkageName    = 0x6e
	atStrOffsetsBase = 0x72
	atAddrBase       = 0x73
	atRnglistsBase   = 0x74
	atMIPSLinkage    = 0x2007

	formAddr         = 0x01
	formBlock2       = 0x03
	formBlock4       = 0x04
	formData2        = 0x05
	formData4        = 0x06
	formData8        = 0x07
	formString       = 0x08
	formBlock        = 0x09
	formBlock1       = 0x0a
	formData1        = 0x0b
	formFlag         = 0x0c
	formSdata        = 0x0d
	formStrp         = 0x0e
	formUdata        = 0x0f
	formRefAddr      = 0x10
	formRef1         = 0x11
	formRef2         = 0x12
	formRef4         = 0x13
	formRef8         = 0x14
	formRefUdata     = 0x15
	formIndirect     = 0x16
	formSecOffset    = 0x17
	formExprloc      = 0x18
	formFlagPresent  = 0x19
	formStrx         = 0x1a
	formAddrx        = 0x1b
	formRefSup4      = 0x1c
	formStrpSup      = 0x1d
	formData16       = 0x1e
	formLineStrp     = 0x1f
	formRefSig8      = 0x20
	formImplicit     = 0x21
	formLoclistx     = 0x22
	formRnglistx     = 0x23
	formRefSup8      = 0x24
	formStrx1        = 0x25
	formStrx2        = 0x26
	formStrx3        = 0x27
	formStrx4        = 0x28
	formAddrx1       = 0x29
	formAddrx2       = 0x2a
	formAddrx3       = 0x2b
	formAddrx4       = 0x2c
	formGNUAddrIndex = 0x1f01
	formGNUStrIndex  = 0x1f02
	formGNURefAlt    = 0x1f20
	formGNUStrpAlt   = 0x1f21
)

// keptTag reports whether the converter reads DIEs of tag t: functions,
// inlined calls, the blocks between them, and the scopes that qualify
// names. Other DIEs (types, variables, parameters: most of the DWARF) are
// only stepped over.
func keptTag(t uint64) bool {
	switch t {
	case tagCompileUnit, tagSubprogram, tagInlinedSubroutine, tagLexicalBlock,
		tagNamespace, tagClassType, tagStructType, tagUnionType:
		return true
	}
	return false
}

// Attribute slots: the attributes a DIE is decoded into.
const (
	slotName = iota
	slotLinkage
	slotMIPSLinkage
	slotLowPC
	slotHighPC
	slotRanges
	slotOrigin
	slotSpec
	slotCallFile
	slotCallLine
	slotDeclFile
	slotDeclLine
	slotLanguage
	slotCompDir
	slotStmtList
	slotEntryPC
	slotAddrBase
	slotStrOffsetsBase
	slotRnglistsBase
	numSlots
	noSlot = 0xff
)

func attrSlot(attr uint64) uint8 {
	switch attr {
	case atName:
		return slotName
	case atLinkageName:
		return slotLinkage
	case atMIPSLinkage:
		return slotMIPSLinkage
	case atLowPC:
		return slotLowPC
	case atHighPC:
		return slotHighPC
	case atRanges:
		return slotRanges
	case atAbstractOrigin:
		return slotOrigin
	case atSpecification:
		return slotSpec
	case atCallFile:
		return slotCallFile
	case atCallLine:
		return slotCallLine
	case atDeclFile:
		return slotDeclFile
	case atDeclLine:
		return slotDeclLine
	case atLanguage:
		return slotLanguage
	case atCompDir:
		return slotCompDir
	case atStmtList:
		return slotStmtList
	case atEntryPC:
		return slotEntryPC
	case atAddrBase:
		return slotAddrBase
	case atStrOffsetsBase:
		return slotStrOffsetsBase
	case atRnglistsBase:
		return slotRnglistsBase
	}
	return noSlot
}

// attrOp decodes or skips one attribute of an abbreviation. Runs of
// fixed-size attributes that are only skipped are merged into one op with
// form 0 and size the run's byte count.
type attrOp struct {
	form     uint16
	slot     uint8
	size     uint32 // fixed size in bytes, or varSize
	implicit int64  // DW_FORM_implicit_const's value
}

const varSize = ^uint32(0)

// abbrev is an abbreviation compiled for one unit format.
type abbrev struct {
	tag      uint64
	children bool
	kept     bool
	skip     []attrOp // for walking past the DIE
	decode   []attrOp // for reading it, one op per attribute
}

// abbrevTable maps abbreviation codes to abbreviations.
type abbrevTable struct {
	dense  []int32 // code → index in list, -1 when absent
	sparse map[uint64]int32
	list   []abbrev
}

func (t *abbrevTable) lookup(code uint64) *abbrev {
	if code < uint64(len(t.dense)) {
		if i := t.dense[code]; i >= 0 {
			return &t.list[i]
		}
		return nil
	}
	if i, ok := t.sparse[code]; ok {
		return &t.list[i]
	}
	return nil
}

// unitFormat is what attribute sizes depend on.
type unitFormat struct {
	abbrevOff uint64
	addrSize  int
	dwarf64   bool
	v2        bool // DW_FORM_ref_addr is address-sized
}

// fixedFormSize is the size of a form's value, varSize when it is read
// from the data, and ok false for an unknown form.
func fixedFormSize(form uint64, f unitFormat) (uint32, bool) {
	off := uint32(4)
	if f.dwarf64 {
		off = 8
	}
	switch form {
	case formAddr:
		return uint32(f.addrSize), true
	case formData1, formRef1, formFlag, formStrx1, formAddrx1:
		return 1, true
	case formData2, formRef2, formStrx2, formAddrx2:
		return 2, true
	case formStrx3, formAddrx3:
		return 3, true
	case formData4, formRef4, formStrx4, formAddrx4, formRefSup4:
		return 4, true
	case formData8, formRef8, formRefSig8, formRefSup8:
		return 8, true
	case formData16:
		return 16, true
	case formStrp, formLineStrp, formSecOffset, formStrpSup, formGNURefAlt, formGNUStrpAlt:
		return off, true
	case formRefAddr:
		if f.v2 {
			return uint32(f.addrSize), true
		}
		return off, true
	case formFlagPresent, formImplicit:
		return 0, true
	case formBlock1, formBlock2, formBlock4, formBlock, formExprloc, formString,
		formUdata, formSdata, formRefUdata, formStrx, formAddrx, formLoclistx, formRnglistx,
		formIndirect, formGNUAddrIndex, formGNUStrIndex:
		return varSize, true
	}
	return 0, false
}

// maxAbbrevs caps one table: codes are ULEB128s, a table has one per
// distinct DIE shape, and real tables hold a few hundred.
const maxAbbrevs = 1 << 20

// parseAbbrevs reads the abbreviation table at f.abbrevOff.
func parseAbbrevs(sect []byte, f unitFormat) (*abbrevTable, error) {
	if f.abbrevOff >= uint64(len(sect)) {
		return nil, fmt.Errorf("debug_abbrev offset %#x out of range", f.abbrevOff)
	}
	b := cursor{name: "debug_abbrev", b: sect, off: int(f.abbrevOff)}
	t := &abbrevTable{}
	for b.err == nil {
		code := b.uleb()
		if code == 0 || b.err != nil {
			break
		}
		if len(t.list) >= maxAbbrevs {
			return nil, fmt.Errorf("debug_abbrev table at %#x: more than %d abbreviations", f.abbrevOff, maxAbbrevs)
		}
		at := b.off
		a := abbrev{tag: b.uleb(), children: b.u8() != 0}
		a.kept = keptTag(a.tag)
		for b.err == nil {
			attr, form := b.uleb(), b.uleb()
			var implicit int64
			if form == formImplicit {
				implicit = b.sleb()
			}
			if attr == 0 && form == 0 {
				break
			}
			size, ok := fixedFormSize(form, f)
			if !ok {
				return nil, fmt.Errorf("debug_abbrev at %#x: unknown form %#x", at, form)
			}
			op := attrOp{form: uint16(form), slot: attrSlot(attr), size: size, implicit: implicit}
			a.decode = append(a.decode, op)
			if n := len(a.skip); size != varSize && n > 0 && a.skip[n-1].form == 0 {
				a.skip[n-1].size += size
			} else if size != varSize {
				a.skip = append(a.skip, attrOp{size: size})
			} else {
				a.skip = append(a.skip, op)
			}
		}
		if b.err != nil {
			break
		}
		if code < 1<<16 {
			for uint64(len(t.dense)) <= code {
				t.dense = append(t.dense, -1)
			}
			t.dense[code] = int32(len(t.list))
		} else {
			if t.sparse == nil {
				t.sparse = map[uint64]int32{}
			}
			t.sparse[code] = int32(len(t.list))
		}
		t.list = append(t.list, a)
	}
	if b.err != nil {
		return nil, b.err
	}
	return t, nil
}

// newDWARFData reads the unit headers of d.info, the abbreviation tables
// they use and the unit DIEs' DWARF 5 bases.
func newDWARFData(d *dwarfData) error {
	tables := map[unitFormat]*abbrevTable{}
	b := cursor{name: "debug_info", b: d.info, order: d.order}
	for b.off < len(b.b) {
		u := unitHeader{off: uint64(b.off)}
		n := uint64(b.u32())
		if n == 0xffffffff {
			u.dwarf64 = true
			n = b.u64()
		} else if n >= 0xfffffff0 {
			return fmt.Errorf("debug_info unit at %#x: reserved length %#x", u.off, n)
		}
		if b.err != nil || n > uint64(len(b.b)-b.off) {
			return fmt.Errorf("debug_info unit at %#x: length %#x past the section", u.off, n)
		}
		u.end = uint64(b.off) + n
		hdr := cursor{name: "debug_info", b: b.b[:u.end], off: b.off, order: d.order}
		b.off = int(u.end)
		u.version = int(hdr.u16())
		var abbrevOff uint64
		switch {
		case u.version >= 2 && u.version <= 4:
			abbrevOff = hdr.uint(u.offSize())
			u.addrSize = int(hdr.u8())
		case u.version == 5:
			typ := hdr.u8()
			u.addrSize = int(hdr.u8())
			abbrevOff = hdr.uint(u.offSize())
			switch typ {
			case 4, 5: // skeleton, split_compile: DWO id
				hdr.u64()
			case 2, 6: // type, split_type: signature, type offset
				hdr.u64()
				hdr.uint(u.offSize())
			}
		default:
			return fmt.Errorf("debug_info unit at %#x: unsupported version %d", u.off, u.version)
		}
		if hdr.err != nil {
			return fmt.Errorf("debug_info unit at %#x: truncated header", u.off)
		}
		switch u.addrSize {
		case 1, 2, 4, 8:
		default:
			return fmt.Errorf("debug_info unit at %#x: unsupported address size %d", u.off, u.addrSize)
		}
		u.dieOff = uint64(hdr.off)
		f := unitFormat{abbrevOff: abbrevOff, addrSize: u.addrSize, dwarf64: u.dwarf64, v2: u.version == 2}
		t, ok := tables[f]
		if !ok {
			var err error
			if t, err = parseAbbrevs(d.abbrev, f); err != nil {
				return fmt.Errorf("debug_info unit at %#x: %w", u.off, err)
			}
			tables[f] = t
		}
		u.abbrevs = t
		if u.dieOff < u.end {
			var a dieAttrs
			if err := d.readDIE(&u, u.dieOff, &a); err != nil {
				return err
			}
			u.tag = a.tag
			if u.version >= 5 {
				u.addrBase, _ = a.constant(slotAddrBase)
				u.strOffsetsBase, _ = a.constant(slotStrOffsetsBase)
				u.rnglistsBase, _ = a.constant(slotRnglistsBase)
			}
		}
		d.units = append(d.units, u)
	}
	return nil
}

// unitAt returns the unit whose DIEs include offset off.
func (d *dwarfData) unitAt(off uint64) *unitHeader {
	i, _ := slices.BinarySearchFunc(d.units, off, func(u unitHeader, o uint64) int {
		if u.end <= o {
			return -1
		}
		return 1
	})
	if i < len(d.units) && d.units[i].dieOff <= off {
		return &d.units[i]
	}
	return nil
}

// attrVal is an attribute's form and raw value: the value itself for
// constants, addresses and references (made absolute), an index for the
// *x forms, an offset for strings (into .debug_info for DW_FORM_string).
type attrVal struct {
	form uint16
	v    uint64
}

// dieAttrs is a decoded DIE: its tag and the attributes the converter
// reads. Only the slots in present hold values: a decode resets one word,
// not the array.
type dieAttrs struct {
	tag     uint64
	u       *unitHeader
	d       *dwarfData
	present uint32 // bit per slot
	vals    [numSlots]attrVal
}

func (a *dieAttrs) has(s int) bool { return a.present&(1<<s) != 0 }

// val is slot s's value, form 0 when absent.
func (a *dieAttrs) val(s int) attrVal {
	if !a.has(s) {
		return attrVal{}
	}
	return a.vals[s]
}

// readDIE decodes the DIE at off of unit u into a.
func (d *dwarfData) readDIE(u *unitHeader, off uint64, a *dieAttrs) error {
	a.u, a.d, a.present = u, d, 0
	b := cursor{name: "debug_info", b: d.info[:u.end], off: int(off), order: d.order}
	code := b.uleb()
	if b.err != nil {
		return b.err
	}
	if code == 0 {
		return fmt.Errorf("debug_info: null entry at offset %#x", off)
	}
	ab := u.abbrevs.lookup(code)
	if ab == nil {
		return fmt.Errorf("debug_info: unknown abbreviation %d at offset %#x", code, off)
	}
	a.tag = ab.tag
	for i := range ab.decode {
		op := &ab.decode[i]
		if op.slot == noSlot {
			b.skipAttr(op, u)
			continue
		}
		form := uint64(op.form)
		if form == formIndirect {
			if form = b.uleb(); form == formIndirect || form == formImplicit {
				b.fail("bad DW_FORM_indirect")
			}
		}
		a.vals[op.slot] = attrVal{form: uint16(form), v: b.formValue(form, op.implicit, u)}
		a.present |= 1 << op.slot
	}
	return b.err
}

// formValue reads one value of form: see attrVal.
func (b *cursor) formValue(form uint64, implicit int64, u *unitHeader) uint64 {
	switch form {
	case formString:
		at := b.off
		b.cstrBytes()
		return uint64(at)
	case formRef1, formRef2, formRef4, formRef8:
		size, _ := fixedFormSize(form, unitFormat{})
		return u.off + b.uint(int(size))
	case formRefUdata:
		return u.off + b.uleb()
	case formRefAddr:
		if u.version == 2 {
			return b.uint(u.addrSize)
		}
		return b.uint(u.offSize())
	case formUdata, formStrx, formAddrx, formRnglistx, formLoclistx, formGNUAddrIndex, formGNUStrIndex:
		return b.uleb()
	case formSdata:
		return uint64(b.sleb())
	case formImplicit:
		return uint64(implicit)
	case formFlagPresent:
		return 1
	case formBlock1, formBlock2, formBlock4, formBlock, formExprloc, formData16:
		b.skipForm(form, u)
		return 0
	}
	size, ok := fixedFormSize(form, unitFormat{addrSize: u.addrSize, dwarf64: u.dwarf64, v2: u.version == 2})
	if !ok || size == varSize {
		b.fail(fmt.Sprintf("unknown form %#x", form))
		return 0
	}
	return b.uint(int(size))
}

// skipAttr steps over one attribute (or a merged run).
func (b *cursor) skipAttr(op *attrOp, u *unitHeader) {
	if op.size != varSize {
		if uint64(len(b.b)-b.off) < uint64(op.size) {
			b.fail("truncated attribute")
			return
		}
		b.off += int(op.size)
		return
	}
	b.skipForm(uint64(op.form), u)
}

// skipForm steps over a value of a variable-size form.
func (b *cursor) skipForm(form uint64, u *unitHeader) {
	switch form {
	case formString:
		b.cstrBytes()
	case formUdata, formSdata, formRefUdata, formStrx, formAddrx, formLoclistx, formRnglistx, formGNUAddrIndex, formGNUStrIndex:
		b.skipLEB()
	case formBlock1:
		b.skip(uint64(b.u8()))
	case formBlock2:
		b.skip(uint64(b.u16()))
	case formBlock4:
		b.skip(uint64(b.u32()))
	case formBlock, formExprloc:
		b.skip(b.uleb())
	case formIndirect:
		f := b.uleb()
		if f == formIndirect || f == formImplicit {
			b.fail("bad DW_FORM_indirect")
			return
		}
		size, ok := fixedFormSize(f, unitFormat{addrSize: u.addrSize, dwarf64: u.dwarf64, v2: u.version == 2})
		switch {
		case !ok:
			b.fail(fmt.Sprintf("unknown form %#x", f))
		case size == varSize:
			b.skipForm(f, u)
		default:
			b.skip(uint64(size))
		}
	default:
		size, ok := fixedFormSize(form, unitFormat{addrSize: u.addrSize, dwarf64: u.dwarf64, v2: u.version == 2})
		if !ok || size == varSize {
			b.fail(fmt.Sprintf("unknown form %#x", form))
			return
		}
		b.skip(uint64(size))
	}
}

// The accessors below answer as debug/dwarf's Entry.Val type assertions
// did (an int64 constant, a uint64 address, a string, an Offset), so that
// the converter's output did not change when it stopped using debug/dwarf.

// constant is the attribute as an integer constant.
func (a *dieAttrs) constant(s int) (uint64, bool) {
	switch v := a.val(s); v.form {
	case formData1, formData2, formData4, formData8, formSdata, formUdata, formImplicit,
		formSecOffset, formGNURefAlt, formGNUStrpAlt:
		return v.v, true
	}
	return 0, false
}

// address is the attribute as an address (DW_FORM_addr or an index into
// .debug_addr).
func (a *dieAttrs) address(s int) (uint64, bool) {
	switch v := a.val(s); v.form {
	case formAddr:
		return v.v, true
	case formAddrx, formAddrx1, formAddrx2, formAddrx3, formAddrx4:
		return a.d.debugAddr(a.u, a.u.addrBase, v.v)
	}
	return 0, false
}

// ref is the attribute as the .debug_info offset of another DIE.
func (a *dieAttrs) ref(s int) (uint64, bool) {
	switch v := a.val(s); v.form {
	case formRef1, formRef2, formRef4, formRef8, formRefUdata, formRefAddr:
		return v.v, true
	}
	return 0, false
}

// str is the attribute as a string.
func (a *dieAttrs) str(s int) (string, bool) {
	v := a.val(s)
	var sect []byte
	off := v.v
	switch v.form {
	case formString:
		sect = a.d.info
	case formStrp:
		sect = a.d.str
	case formLineStrp:
		sect = a.d.lineStr
	case formStrx, formStrx1, formStrx2, formStrx3, formStrx4:
		n := uint64(a.u.offSize())
		at := a.u.strOffsetsBase + off*n
		if off > uint64(len(a.d.strOffsets))/n || at > uint64(len(a.d.strOffsets))-n {
			return "", false
		}
		b := cursor{b: a.d.strOffsets, off: int(at), order: a.d.order}
		off, sect = b.uint(int(n)), a.d.str
	default:
		return "", false
	}
	return strAt(sect, off)
}

// debugAddr is entry idx of the unit's .debug_addr table.
func (d *dwarfData) debugAddr(u *unitHeader, base, idx uint64) (uint64, bool) {
	n := uint64(u.addrSize)
	at := base + idx*n
	if idx > uint64(len(d.addr))/n || at < base || at > uint64(len(d.addr))-n || uint64(len(d.addr)) < n {
		return 0, false
	}
	b := cursor{b: d.addr, off: int(at), order: d.order}
	return b.uint(int(n)), true
}

// unitBase is the base address of the unit's range lists: its entry PC or
// low PC.
func unitBase(cu *dieAttrs) uint64 {
	if v, ok := cu.address(slotEntryPC); ok {
		return v
	}
	v, _ := cu.address(slotLowPC)
	return v
}

// rangesOf returns the address ranges of DIE a, in the order the DWARF
// lists them, as debug/dwarf's Data.Ranges did: low/high PC first, then
// the range list. cu is a's unit DIE. ok is false for an unreadable list.
func (d *dwarfData) rangesOf(a, cu *dieAttrs, dst [][2]uint64) ([][2]uint64, bool) {
	dst = dst[:0]
	low, lowOK := a.address(slotLowPC)
	if high, highOK := a.highPC(low); lowOK && highOK {
		dst = append(dst, [2]uint64{low, high})
	}
	u := a.u
	if u.version >= 5 && d.rnglists != nil {
		var off uint64
		switch v := a.val(slotRanges); v.form {
		case formSecOffset:
			off = v.v
		case formRnglistx:
			n := uint64(u.offSize())
			at := u.rnglistsBase + v.v*n
			if v.v > uint64(len(d.rnglists))/n || at > uint64(len(d.rnglists))-n || uint64(len(d.rnglists)) < n {
				return nil, false
			}
			b := cursor{b: d.rnglists, off: int(at), order: d.order}
			off = u.rnglistsBase + b.uint(int(n))
		default:
			return dst, true
		}
		addrBase, _ := cu.constant(slotAddrBase)
		return d.rnglist(u, off, unitBase(cu), addrBase, dst)
	}
	if off, ok := a.constant(slotRanges); ok && d.ranges != nil {
		return d.rangeList(u, off, unitBase(cu), dst)
	}
	return dst, true
}

// highPC is DW_AT_high_pc as an address: absolute (address class), or an
// offset from low (constant class).
func (a *dieAttrs) highPC(low uint64) (uint64, bool) {
	switch v := a.val(slotHighPC); v.form {
	case formData1, formData2, formData4, formData8, formSdata, formUdata, formImplicit:
		return low + v.v, true
	}
	return a.address(slotHighPC)
}

// maxRanges bounds one range list: each entry takes at least two bytes of
// the section, so this is only reached by lists no compiler writes.
const maxRanges = 1 << 20

// rangeList reads a DWARF 2-4 .debug_ranges list.
func (d *dwarfData) rangeList(u *unitHeader, off, base uint64, dst [][2]uint64) ([][2]uint64, bool) {
	if off > uint64(len(d.ranges)) {
		return nil, false
	}
	b := cursor{name: "debug_ranges", b: d.ranges, off: int(off), order: d.order}
	sel := ^uint64(0) >> (64 - 8*u.addrSize)
	for b.off < len(b.b) && len(dst) < maxRanges {
		low, high := b.uint(u.addrSize), b.uint(u.addrSize)
		if low == 0 && high == 0 {
			break
		}
		if low == sel {
			base = high
		} else {
			dst = append(dst, [2]uint64{base + low, base + high})
		}
	}
	return dst, true
}

// DWARF 5 range list entry kinds.
const (
	rleEndOfList = iota
	rleBaseAddressx
	rleStartxEndx
	rleStartxLength
	rleOffsetPair
	rleBaseAddress
	rleStartEnd
	rleStartLength
)

// rnglist reads a DWARF 5 .debug_rnglists list.
func (d *dwarfData) rnglist(u *unitHeader, off, base, addrBase uint64, dst [][2]uint64) ([][2]uint64, bool) {
	if off > uint64(len(d.rnglists)) {
		return nil, false
	}
	b := cursor{name: "debug_rnglists", b: d.rnglists, off: int(off), order: d.order}
	addr := func(idx uint64) uint64 {
		v, ok := d.debugAddr(u, addrBase, idx)
		if !ok {
			b.fail("bad .debug_addr index")
		}
		return v
	}
	for len(dst) < maxRanges {
		switch b.u8() {
		case rleEndOfList:
			return dst, b.err == nil
		case rleBaseAddressx:
			base = addr(b.uleb())
		case rleStartxEndx:
			s, e := addr(b.uleb()), addr(b.uleb())
			dst = append(dst, [2]uint64{s, e})
		case rleStartxLength:
			s := addr(b.uleb())
			dst = append(dst, [2]uint64{s, s + b.uleb()})
		case rleOffsetPair:
			s, e := b.uleb(), b.uleb()
			dst = append(dst, [2]uint64{base + s, base + e})
		case rleBaseAddress:
			base = b.uint(u.addrSize)
		case rleStartEnd:
			s, e := b.uint(u.addrSize), b.uint(u.addrSize)
			dst = append(dst, [2]uint64{s, e})
		case rleStartLength:
			s := b.uint(u.addrSize)
			dst = append(dst, [2]uint64{s, s + b.uleb()})
		}
		if b.err != nil {
			return nil, false
		}
	}
	return dst, true
}

// cstrBytes reads a NUL-terminated string in place.
func (b *cursor) cstrBytes() []byte {
	if b.err != nil {
		return nil
	}
	i := bytes.IndexByte(b.b[b.off:], 0)
	if i < 0 {
		b.fail("unterminated string")
		return nil
	}
	s := b.b[b.off : b.off+i]
	b.off += i + 1
	return s
}
