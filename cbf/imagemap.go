package cbf

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Limits an ImageMap must respect, so that decoding one from untrusted
// bytes costs bounded memory and time.
const (
	// MaxImages is the most images a map may hold.
	MaxImages = 1 << 20
	// MaxBuildIDLen is the longest build ID in bytes.
	MaxBuildIDLen = 1024
	// MaxPathLen is the longest path in bytes.
	MaxPathLen = 4096
	// MaxPlatformLen is the longest platform string; CIF stores its length
	// in one byte.
	MaxPlatformLen = 255
)

// Image is one file mapped into a process with its text (executable code).
type Image struct {
	// Name is the last component of Path. CIF does not store it: a
	// decoded map derives it from Path, as Swift does.
	Name string
	// Path is the file's path as the process sees it; "" when unknown.
	Path string
	// BuildID is the file's NT_GNU_BUILD_ID (or Mach-O UUID), nil when it
	// has none. It names the exact binary wherever it is stored, which is
	// what a symbolizer on another host needs.
	BuildID []byte
	// Base and EndOfText bound the text: addresses in [Base, EndOfText)
	// belong to the image. EndOfText is at most the word's largest
	// address, so the last byte of the address space is never text.
	Base, EndOfText uint64
	// TextOffset is the offset in the file that is mapped at Base, so an
	// address becomes a file offset for symbolization. CIF does not carry
	// it; maps decoded from CIF have 0 there, which is right for maps whose
	// Base is the load address of the file's start, as Swift's are.
	TextOffset uint64
}

// FileOffset returns the offset in the image's file of the byte mapped at
// addr, which must lie in the image.
func (im *Image) FileOffset(addr uint64) uint64 {
	return addr - im.Base + im.TextOffset
}

// Contains reports whether addr lies in the image's text.
func (im *Image) Contains(addr uint64) bool {
	return im.Base <= addr && addr < im.EndOfText
}

// ImageMap is the set of images loaded in a process, sorted by base address
// and non-overlapping, with an index by build ID.
type ImageMap struct {
	platform string
	ws       WordSize
	images   []Image
	byID     map[string][]int
}

// NewImageMap checks images, sorts a copy of them by base address and
// indexes them. An empty BuildID is stored as nil, bytes of Path that are
// not UTF-8 become U+FFFD (as Swift 6.2 does), and an empty Name is taken
// from Path. It fails when an image's text is empty or reaches past
// the word size, when images overlap, or when a limit is exceeded.
// platform describes the system, as "Linux (Debian GNU/Linux 12 (bookworm))";
// sprof recordings leave it empty, since their header says it once.
func NewImageMap(platform string, ws WordSize, images []Image) (*ImageMap, error) {
	if !ws.valid() {
		return nil, fmt.Errorf("image map: invalid word size %d", ws)
	}
	if len(platform) > MaxPlatformLen || !utf8.ValidString(platform) {
		return nil, fmt.Errorf("image map: platform %.40q is not UTF-8 of at most %d bytes", platform, MaxPlatformLen)
	}
	if len(images) > MaxImages {
		return nil, fmt.Errorf("image map: %d images, more than %d", len(images), MaxImages)
	}
	sorted := slices.Clone(images)
	slices.SortStableFunc(sorted, func(a, b Image) int { return cmp.Compare(a.Base, b.Base) })
	for i := range sorted {
		im := &sorted[i]
		im.Path = strings.ToValidUTF8(im.Path, "\uFFFD") // Linux paths are bytes; CIF's are UTF-8
		if err := checkImage(im, ws); err != nil {
			return nil, fmt.Errorf("image map: image %q: %w", im.Path, err)
		}
		if len(im.BuildID) == 0 {
			im.BuildID = nil
		}

		if im.Name == "" {
			im.Name = baseName(im.Path)
		}
		if i > 0 && im.Base < sorted[i-1].EndOfText {
			return nil, fmt.Errorf("image map: %q at 0x%x overlaps %q ending at 0x%x",
				im.Path, im.Base, sorted[i-1].Path, sorted[i-1].EndOfText)
		}
	}
	return newIndexedMap(platform, ws, sorted), nil
}

func checkImage(im *Image, ws WordSize) error {
	switch {
	case im.EndOfText <= im.Base:
		return fmt.Errorf("end of text 0x%x not above base 0x%x", im.EndOfText, im.Base)
	case im.EndOfText > ws.Mask():
		return fmt.Errorf("end of text 0x%x beyond the %d-bit word", im.EndOfText, ws.Bits())
	case len(im.BuildID) > MaxBuildIDLen:
		return fmt.Errorf("build ID of %d bytes, more than %d", len(im.BuildID), MaxBuildIDLen)
	case len(im.Path) > MaxPathLen:
		return fmt.Errorf("path longer than %d bytes", MaxPathLen)
	}
	return nil
}

// newIndexedMap wraps images already checked and sorted.
func newIndexedMap(platform string, ws WordSize, images []Image) *ImageMap {
	m := &ImageMap{platform: platform, ws: ws, images: images, byID: make(map[string][]int)}
	for i := range images {
		if id := images[i].BuildID; id != nil {
			m.byID[string(id)] = append(m.byID[string(id)], i)
		}
	}
	return m
}

// baseName is the text after the last '/' or '\', as Swift names images.
func baseName(path string) string {
	return path[strings.LastIndexAny(path, `/\`)+1:]
}

// Platform returns the platform string.
func (m *ImageMap) Platform() string { return m.platform }

// WordSize returns the word size of the addresses.
func (m *ImageMap) WordSize() WordSize { return m.ws }

// Len returns the number of images.
func (m *ImageMap) Len() int { return len(m.images) }

// Image returns image i, in order of base address. The caller must not
// modify it.
func (m *ImageMap) Image(i int) *Image { return &m.images[i] }

// Images returns the images sorted by base address. The caller must not
// modify them.
func (m *ImageMap) Images() []Image { return m.images }

// Lookup returns the index of the image whose text holds addr, or -1.
func (m *ImageMap) Lookup(addr uint64) int {
	// The first image starting above addr; the one before may hold it.
	lo, hi := 0, len(m.images)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if m.images[mid].Base <= addr {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo > 0 && addr < m.images[lo-1].EndOfText {
		return lo - 1
	}
	return -1
}

// ByBuildID returns the indexes of the images with build ID id, in order of
// base address; the same file mapped twice gives two.
func (m *ImageMap) ByBuildID(id []byte) []int {
	return m.byID[string(id)]
}

// String returns the map in Swift's text form: the platform, then one line
// per image with its text range, build ID, name and path.
func (m *ImageMap) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Platform: %s\n\n", m.platform)
	for _, im := range m.images {
		id := "<no build ID>"
		if im.BuildID != nil {
			id = fmt.Sprintf("%x", im.BuildID)
		}
		fmt.Fprintf(&b, "0x%016x-0x%016x %s %s %s\n", im.Base, im.EndOfText, id, im.Name, im.Path)
	}
	return b.String()
}

// Equal reports whether m and o hold the same platform, word size and
// images.
func (m *ImageMap) Equal(o *ImageMap) bool {
	return m.platform == o.platform && m.ws == o.ws &&
		slices.EqualFunc(m.images, o.images, func(a, b Image) bool {
			return a.Name == b.Name && a.Path == b.Path && bytes.Equal(a.BuildID, b.BuildID) &&
				a.Base == b.Base && a.EndOfText == b.EndOfText && a.TextOffset == b.TextOffset
		})
}
