package sframe

import "fmt"

// Section layout constants from the SFrame specification.
const (
	magic      = 0xdee2
	headerSize = 28
	// attrSize is the size of a V3 FDE attribute record, which sits in
	// the FRE sub-section in front of the function's rows.
	attrSize = 5
)

// Version is the SFrame format version of a section.
type Version uint8

// The SFrame versions this package reads.
const (
	Version1 Version = 1
	Version2 Version = 2
	Version3 Version = 3
)

func (v Version) String() string {
	if v >= Version1 && v <= Version3 {
		return fmt.Sprintf("SFRAME_VERSION_%d", uint8(v))
	}
	return fmt.Sprintf("SFrame version %d", uint8(v))
}

// fdeSize is the size of one entry of the FDE array (in V3, of the index
// entry; its attribute record lives with the rows).
func (v Version) fdeSize() uint64 {
	switch v {
	case Version1:
		return 17
	case Version2:
		return 20
	default:
		return 16
	}
}

// flagsAllowed is the set of header flags a version defines.
func (v Version) flagsAllowed() Flags {
	switch v {
	case Version1:
		return FlagFDESorted | FlagFramePointer
	case Version2:
		return FlagFDESorted | FlagFramePointer | FlagFDEFuncStartPCRel
	default:
		return FlagFDESorted | FlagFDEFuncStartPCRel
	}
}

// Flags is the header's flags byte.
type Flags uint8

// Header flags.
const (
	// FlagFDESorted says the FDEs are sorted by start address.
	FlagFDESorted Flags = 0x1
	// FlagFramePointer says all code keeps the frame pointer (V1, V2).
	FlagFramePointer Flags = 0x2
	// FlagFDEFuncStartPCRel says an FDE's start address is relative to
	// the start field itself rather than to the section.
	FlagFDEFuncStartPCRel Flags = 0x4
)

var flagNames = []struct {
	f    Flags
	name string
}{
	{FlagFDESorted, "SFRAME_F_FDE_SORTED"},
	{FlagFramePointer, "SFRAME_F_FRAME_POINTER"},
	{FlagFDEFuncStartPCRel, "SFRAME_F_FDE_FUNC_START_PCREL"},
}

// Names returns the names of the flags that are set, in bit order, with
// unknown bits as hexadecimal.
func (f Flags) Names() []string {
	var names []string
	rest := f
	for _, n := range flagNames {
		if f&n.f != 0 {
			names = append(names, n.name)
			rest &^= n.f
		}
	}
	if rest != 0 {
		names = append(names, fmt.Sprintf("%#x", uint8(rest)))
	}
	return names
}

func (f Flags) String() string {
	names := f.Names()
	if len(names) == 0 {
		return "NONE"
	}
	s := names[0]
	for _, n := range names[1:] {
		s += "|" + n
	}
	return s
}

// ABI is the header's abi_arch byte: the architecture and byte order.
type ABI uint8

// SFrame ABI identifiers.
const (
	ABIAArch64BE ABI = 1
	ABIAArch64LE ABI = 2
	ABIAMD64LE   ABI = 3
	ABIS390XBE   ABI = 4
)

func (a ABI) String() string {
	switch a {
	case ABIAArch64BE:
		return "SFRAME_ABI_AARCH64_ENDIAN_BIG"
	case ABIAArch64LE:
		return "SFRAME_ABI_AARCH64_ENDIAN_LITTLE"
	case ABIAMD64LE:
		return "SFRAME_ABI_AMD64_ENDIAN_LITTLE"
	case ABIS390XBE:
		return "SFRAME_ABI_S390X_ENDIAN_BIG"
	}
	return fmt.Sprintf("SFrame ABI %d", uint8(a))
}

// Arch returns the architecture of a supported ABI.
func (a ABI) Arch() Arch {
	if a == ABIAMD64LE {
		return ArchAMD64
	}
	return ArchARM64
}

// Arch is an architecture the unwinder knows the registers of.
type Arch uint8

// Architectures.
const (
	ArchAMD64 Arch = iota + 1
	ArchARM64
)

func (a Arch) String() string {
	switch a {
	case ArchAMD64:
		return "amd64"
	case ArchARM64:
		return "arm64"
	}
	return fmt.Sprintf("Arch(%d)", uint8(a))
}

// DWARF register numbers of the registers SFrame rules refer to.
const (
	amd64RegFP = 6  // rbp
	amd64RegSP = 7  // rsp
	arm64RegFP = 29 // x29
	arm64RegLR = 30 // x30
	arm64RegSP = 31 // sp
)

// RegSP and RegFP return the DWARF numbers of the stack and frame pointer.
func (a Arch) RegSP() uint8 {
	if a == ArchAMD64 {
		return amd64RegSP
	}
	return arm64RegSP
}

func (a Arch) RegFP() uint8 {
	if a == ArchAMD64 {
		return amd64RegFP
	}
	return arm64RegFP
}

// RegName returns the short name readelf uses for DWARF register reg:
// "sp" and "fp" for the stack and frame pointer, "rN" for the others.
func (a Arch) RegName(reg uint8) string {
	switch reg {
	case a.RegSP():
		return "sp"
	case a.RegFP():
		return "fp"
	}
	return fmt.Sprintf("r%d", reg)
}

// Header is the fixed 28-byte header of an SFrame section.
type Header struct {
	Version          Version
	Flags            Flags
	ABI              ABI
	CFAFixedFPOffset int8 // 0: rows say where FP is saved
	CFAFixedRAOffset int8 // 0: rows say where RA is saved; amd64: -8
	AuxHeaderLen     uint8
	NumFDEs          uint32
	NumFREs          uint32
	FRELen           uint32 // bytes of the FRE sub-section
	FDEOff           uint32 // from the end of the header
	FREOff           uint32 // from the end of the header
}

// FDE types (V3 info2 bits 4..0).
const (
	FDETypeDefault = 0
	FDETypeFlex    = 1
)

// FDE describes one function (or, with PCMask, a run of PLT entries).
type FDE struct {
	Start   uint64 // address of the function's first byte, in the section's address space
	Size    uint32
	Info    uint8 // FRE type, PC type, PAC key, signal bit
	Info2   uint8 // V3: the FDE type
	RepSize uint8 // PCMask: the size of the repeated block
	Offset  uint32
	// rows and nrows locate the function's rows in the Table.
	rows  uint32
	nrows uint32
}

// End returns the address after the function's last byte.
func (f *FDE) End() uint64 { return f.Start + uint64(f.Size) }

// FREType returns how wide the rows' start fields are: 0 (1 byte),
// 1 (2 bytes) or 2 (4 bytes).
func (f *FDE) FREType() uint8 { return f.Info & 0xf }

// PCMask says the rows repeat every RepSize bytes (PLT entries).
func (f *FDE) PCMask() bool { return f.Info&0x10 != 0 }

// PACKeyB says return addresses are signed with the aarch64 B key.
func (f *FDE) PACKeyB() bool { return f.Info&0x20 != 0 }

// Signal says the function is a signal trampoline (V3).
func (f *FDE) Signal() bool { return f.Info&0x80 != 0 }

// Type returns the V3 FDE type (FDETypeDefault or FDETypeFlex).
func (f *FDE) Type() uint8 { return f.Info2 & 0x1f }

// LocKind says how a value (CFA, RA, FP) is recovered.
type LocKind uint8

// Location kinds.
const (
	// LocSame: the value is unchanged. For RA on aarch64, it is still
	// in the link register (usable in the topmost frame only).
	LocSame LocKind = iota
	// LocUndefined: RA is undefined, this is the outermost frame.
	LocUndefined
	// LocCFA: the value is CFA+Off, or the word there if Deref.
	LocCFA
	// LocReg: the value is register Reg plus Off, or the word there if Deref.
	LocReg
)

func (k LocKind) String() string {
	switch k {
	case LocSame:
		return "same"
	case LocUndefined:
		return "undefined"
	case LocCFA:
		return "cfa"
	case LocReg:
		return "reg"
	}
	return fmt.Sprintf("LocKind(%d)", uint8(k))
}

// Loc is a recovery rule for one value.
type Loc struct {
	Kind  LocKind
	Reg   uint8 // DWARF register number, LocReg only
	Deref bool  // read the word at the address rather than take it
	Off   int32
}

// Row is one FRE: the rule from Start (an offset from the function start,
// or within the repeated block for PCMask FDEs) up to the next row.
type Row struct {
	Start uint32
	Info  uint8 // raw FRE info byte
	CFA   Loc   // Kind is LocReg
	RA    Loc
	FP    Loc
	// padRA and padFP record a FLEX padding word (no rule, the default
	// applies); only the readelf-style dump shows the difference.
	padRA, padFP bool
}

// Mangled says the return address is PAC-signed (aarch64).
func (r *Row) Mangled() bool { return r.Info&0x80 != 0 }

// Outermost says the row marks the outermost frame (RA undefined).
func (r *Row) Outermost() bool { return r.RA.Kind == LocUndefined }
