package cbf

import (
	"bytes"
	"math"
	"strings"
	"unicode/utf8"
)

// Path instructions of CIF (cbf.md §3.3).
const (
	pathEnd       = 0x00
	pathStr       = 0x00 // 00cccccc: c literal bytes follow, c = 1..63
	pathFramework = 0x40 // 01cccccc: version byte, c+1 name bytes
	pathExpand    = 0x80 // 10cccccc: prefix c
	pathExpandExt = 0xc0 // 11cccccc: c+1 bytes give v, prefix v+64

	maxStrChunk     = 0x3f
	maxFrameworkLen = 64
	firstLearned    = 32 // codes below are fixed; 12..31 are reserved
)

// fixedPrefixes are the path prefixes every CIF encoder and decoder knows,
// indexed by code.
var fixedPrefixes = [...]string{
	"/lib", "/usr/lib", "/usr/local/lib", "/opt/lib",
	"/System/Library/Frameworks", "/System/Library/PrivateFrameworks",
	"/System/iOSSupport", "/Library/Frameworks", "/System/Applications",
	"/Applications", `C:\Windows\System32`, `C:\Program Files`,
}

// maxLearnedBytes caps the text of the prefixes a decoder learns. Each
// separator in a path defines a prefix as long as the text before it, so
// the table grows with the square of path lengths; real maps stay far below.
const maxLearnedBytes = 1 << 20

// prefixTable holds the path prefixes by code: the fixed ones, the reserved
// gap as empty strings, then those learned from the paths so far.
type prefixTable struct {
	byCode  []string
	learned int // bytes of learned prefixes
}

func newPrefixTable() prefixTable {
	t := prefixTable{byCode: make([]string, firstLearned, 64)}
	copy(t.byCode, fixedPrefixes[:])
	return t
}

// longest returns the code of the longest prefix of s in the table and its
// length, the lowest code among equals; length 0 when none matches.
func (t *prefixTable) longest(s string) (code, n int) {
	for c, p := range t.byCode {
		if len(p) > n && strings.HasPrefix(s, p) {
			code, n = c, len(p)
		}
	}
	return code, n
}

// learn adds the prefixes of literal that end before a separator other than
// its first byte.
func (t *prefixTable) learn(literal string) {
	for i := 1; i < len(literal); i++ {
		if isSep(literal[i]) {
			t.byCode = append(t.byCode, literal[:i])
		}
	}
}

func isSep(c byte) bool { return c == '/' || c == '\\' }

// AppendCIF appends the map in the Compact ImageMap Format, byte for byte
// as Swift's encoder writes it, with one deliberate difference: prefix codes
// of 320 and more take as many bytes as they need, where Swift drops the
// high byte (cbf.md §3.3). TextOffset is not part of CIF and is not written.
func (m *ImageMap) AppendCIF(dst []byte) []byte {
	dst = append(dst, m.ws.infoByte(), byte(len(m.platform)))
	dst = append(dst, m.platform...)
	dst = appendSwiftVarint(dst, uint64(len(m.images)))
	bits := m.ws.Bits()
	table := newPrefixTable()
	var last uint64
	for i := range m.images {
		im := &m.images[i]
		base := signExtend(im.Base, bits)
		delta := base - last
		last = base
		eot := im.EndOfText - im.Base
		an, dn, en := signedLen(base), signedLen(delta), signedLen(eot)
		head, v, vn := byte(0), base, an
		if an > dn { // ties go to absolute, unlike CBF
			head, v, vn = 0x80, delta, dn
		}
		dst = append(dst, head|byte(vn-1)<<3|byte(en-1))
		dst = appendBE(dst, v, vn)
		dst = appendBE(dst, eot, en)
		dst = appendSwiftVarint(dst, uint64(len(im.BuildID)))
		dst = append(dst, im.BuildID...)
		dst = table.appendPath(dst, im.Path, im.Name)
	}
	return dst
}

// appendPath writes path: the longest known prefixes, then the Darwin
// framework form or literal text that teaches the table new prefixes.
func (t *prefixTable) appendPath(dst []byte, rest, name string) []byte {
	for rest != "" {
		code, n := t.longest(rest)
		if n == 0 {
			break
		}
		rest = rest[n:]
		if code < 64 {
			dst = append(dst, pathExpand|byte(code))
			continue
		}
		v := uint64(code - 64)
		nb := unsignedLen(v)
		dst = append(dst, pathExpandExt|byte(nb-1))
		dst = appendBE(dst, v, nb)
	}
	if rest == "" {
		return append(dst, pathEnd)
	}
	if version, ok := frameworkVersion(rest, name); ok {
		dst = append(dst, pathFramework|byte(len(name)-1), version)
		return append(dst, name...)
	}
	t.learn(rest)
	for len(rest) > 0 {
		n := min(len(rest), maxStrChunk)
		dst = append(dst, pathStr|byte(n))
		dst = append(dst, rest[:n]...)
		rest = rest[n:]
	}
	return append(dst, pathEnd)
}

// frameworkVersion reports whether s is /<name>.framework/Versions/<V>/<name>
// and returns V, or whether s is the shallow /<name>.framework/<name> that
// version byte 1 stands for.
func frameworkVersion(s, name string) (byte, bool) {
	if name == "" || len(name) > maxFrameworkLen {
		return 0, false
	}
	if s == "/"+name+".framework/"+name {
		return 1, true
	}
	head := "/" + name + ".framework/Versions/"
	if len(s) != len(head)+2+len(name) || !strings.HasPrefix(s, head) ||
		s[len(head)+1] != '/' || !strings.HasSuffix(s, name) {
		return 0, false
	}
	return s[len(head)], true
}

// appendSwiftVarint writes v in 7-bit groups, most significant first, the
// way Swift does: starting at bit 7*(bitlen/7), which puts a redundant 0x80
// in front when the bit length is a multiple of 7.
func appendSwiftVarint(dst []byte, v uint64) []byte {
	bitLen := 0
	for x := v; x != 0; x >>= 1 {
		bitLen++
	}
	for shift := 7 * (bitLen / 7); shift > 0; shift -= 7 {
		dst = append(dst, 0x80|byte(v>>uint(shift)&0x7f))
	}
	return append(dst, byte(v&0x7f))
}

// cifDecoder reads one CIF map; off is the position in src.
type cifDecoder struct {
	src   []byte
	off   int
	table prefixTable
	path  []byte // scratch for the path being decoded
}

// DecodeImageMap decodes the CIF map at the start of src and returns it with
// the number of bytes it took. It is strict (cbf.md §3.4): any truncation,
// a limit exceeded, a bad path, a text that is empty or passes the word
// size, and images out of order or overlapping are errors, reported as a
// *FormatError naming the offset and the field.
func DecodeImageMap(src []byte) (*ImageMap, int, error) {
	d := cifDecoder{src: src, table: newPrefixTable()}
	m, err := d.imageMap()
	return m, d.off, err
}

func (d *cifDecoder) imageMap() (*ImageMap, error) {
	info, err := d.byte("info byte")
	if err != nil {
		return nil, err
	}
	ws, ok := parseInfo(info)
	if !ok {
		return nil, formatErr(0, "info byte", "0x%02x is not version 0 with a 16-, 32- or 64-bit word", info)
	}
	plen, err := d.byte("platform length")
	if err != nil {
		return nil, err
	}
	platform, err := d.bytes("platform", int(plen))
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(platform) {
		return nil, formatErr(d.off-len(platform), "platform", "not UTF-8")
	}
	countOff := d.off
	count, err := d.varint("image count")
	if err != nil {
		return nil, err
	}
	// An image takes at least 5 bytes: header, base, offset, ID length, path.
	if count > MaxImages || count > uint64(len(d.src)-d.off)/5 {
		return nil, formatErr(countOff, "image count", "%d images exceed the limit %d or the %d bytes left",
			count, MaxImages, len(d.src)-d.off)
	}
	images := make([]Image, count)
	var last uint64
	for i := range images {
		im := &images[i]
		if err := d.image(im, ws, &last); err != nil {
			return nil, err
		}
		if i > 0 && im.Base < images[i-1].EndOfText {
			return nil, formatErr(d.off, "image", "image %d at 0x%x is below the end 0x%x of the image before",
				i, im.Base, images[i-1].EndOfText)
		}
	}
	return newIndexedMap(string(platform), ws, images), nil
}

func (d *cifDecoder) image(im *Image, ws WordSize, last *uint64) error {
	head, err := d.byte("image header")
	if err != nil {
		return err
	}
	v, err := d.signed("base address", int(head>>3&7)+1)
	if err != nil {
		return err
	}
	if head&0x80 != 0 {
		v += *last
	}
	im.Base = v & ws.Mask()
	*last = im.Base
	eotOff := d.off
	eot, err := d.signed("end of text", int(head&7)+1)
	if err != nil {
		return err
	}
	if int64(eot) <= 0 || eot > ws.Mask()-im.Base {
		return formatErr(eotOff, "end of text", "offset %d from base 0x%x is not positive or passes the %d-bit word",
			int64(eot), im.Base, ws.Bits())
	}
	im.EndOfText = im.Base + eot
	idOff := d.off
	idLen, err := d.varint("build ID length")
	if err != nil {
		return err
	}
	if idLen > MaxBuildIDLen {
		return formatErr(idOff, "build ID length", "%d bytes, more than %d", idLen, MaxBuildIDLen)
	}
	id, err := d.bytes("build ID", int(idLen))
	if err != nil {
		return err
	}
	if idLen > 0 {
		im.BuildID = bytes.Clone(id)
	}
	if err := d.decodePath(); err != nil {
		return err
	}
	im.Path = string(d.path)
	im.Name = baseName(im.Path)
	return nil
}

// decodePath reads one path into d.path, learning prefixes from its
// literal text exactly as the encoder does.
func (d *cifDecoder) decodePath() error {
	d.path = d.path[:0]
	start := d.off
	strBase := -1 // where the path's first literal text starts
	for {
		op, err := d.byte("path")
		if err != nil {
			return err
		}
		switch {
		case op == pathEnd:
			if !utf8.Valid(d.path) {
				return formatErr(start, "path", "not UTF-8")
			}
			return nil
		case op < pathFramework:
			lit, err := d.bytes("path string", int(op))
			if err != nil {
				return err
			}
			if strBase < 0 {
				strBase = len(d.path)
			}
			for _, c := range lit {
				if isSep(c) && len(d.path) > strBase {
					if err := d.learn(d.path[strBase:]); err != nil {
						return err
					}
				}
				d.path = append(d.path, c)
			}
		case op < pathExpand:
			return d.framework(op, start)
		default:
			codeOff := d.off - 1
			code, err := d.prefixCode(op)
			if err != nil {
				return err
			}
			if code >= uint64(len(d.table.byCode)) || d.table.byCode[code] == "" {
				return formatErr(codeOff, "path prefix", "code %d is not defined", code)
			}
			d.path = append(d.path, d.table.byCode[code]...)
		}
		if len(d.path) > MaxPathLen {
			return formatErr(start, "path", "longer than %d bytes", MaxPathLen)
		}
	}
}

func (d *cifDecoder) learn(prefix []byte) error {
	d.table.learned += len(prefix)
	if d.table.learned > maxLearnedBytes {
		return formatErr(d.off, "path", "learned prefixes exceed %d bytes", maxLearnedBytes)
	}
	d.table.byCode = append(d.table.byCode, string(prefix))
	return nil
}

func (d *cifDecoder) prefixCode(op byte) (uint64, error) {
	if op < pathExpandExt {
		return uint64(op &^ pathExpandExt), nil
	}
	nb := int(op&0x3f) + 1
	if nb > 8 {
		return 0, formatErr(d.off-1, "path prefix", "code of %d bytes is wider than 8", nb)
	}
	b, err := d.bytes("path prefix", nb)
	if err != nil {
		return 0, err
	}
	v := readBE(b)
	if v > math.MaxUint64-64 {
		return 0, formatErr(d.off-nb, "path prefix", "code %d+64 overflows", v)
	}
	return v + 64, nil
}

// framework appends /<name>.framework/Versions/<V>/<name>, or the shallow
// /<name>.framework/<name> for V = 1, and ends the path.
func (d *cifDecoder) framework(op byte, start int) error {
	version, err := d.byte("framework version")
	if err != nil {
		return err
	}
	name, err := d.bytes("framework name", int(op&0x3f)+1)
	if err != nil {
		return err
	}
	d.path = append(d.path, '/')
	d.path = append(d.path, name...)
	d.path = append(d.path, ".framework/"...)
	if version != 1 {
		d.path = append(d.path, "Versions/"...)
		d.path = append(d.path, version, '/')
	}
	d.path = append(d.path, name...)
	if len(d.path) > MaxPathLen || !utf8.Valid(d.path) {
		return formatErr(start, "path", "not UTF-8 of at most %d bytes", MaxPathLen)
	}
	return nil
}

func (d *cifDecoder) byte(field string) (byte, error) {
	if d.off >= len(d.src) {
		return 0, formatErr(d.off, field, "input ends")
	}
	d.off++
	return d.src[d.off-1], nil
}

func (d *cifDecoder) bytes(field string, n int) ([]byte, error) {
	if n > len(d.src)-d.off {
		return nil, formatErr(d.off, field, "%d bytes run past the input", n)
	}
	d.off += n
	return d.src[d.off-n : d.off : d.off], nil
}

// signed reads n big-endian bytes and sign-extends them.
func (d *cifDecoder) signed(field string, n int) (uint64, error) {
	b, err := d.bytes(field, n)
	if err != nil {
		return 0, err
	}
	return signExtend(readBE(b), 8*n), nil
}

// varint reads a 7-bit varint of at most 9 bytes, so at most 2^63-1.
func (d *cifDecoder) varint(field string) (uint64, error) {
	start := d.off
	var v uint64
	for i := 0; i < 9; i++ {
		b, err := d.byte(field)
		if err != nil {
			return 0, err
		}
		v = v<<7 | uint64(b&0x7f)
		if b&0x80 == 0 {
			return v, nil
		}
	}
	return 0, formatErr(start, field, "varint longer than 9 bytes")
}
