package recording

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/sprof/sprof/cbf"
)

// Image maps are stored once per recording, and each image once: the
// processes of a build, a shell pipeline or a worker pool run the same few
// programs and libraries, each at addresses of its own, and a process
// gets a record for every change of its mappings while it starts up (the
// dynamic loader maps one library after another). A map definition is
// therefore a list of images, each a reference to the recording's image
// table (defining the image there the first time) and a base address. See
// cbf/FORMAT.md §4.

// Limits of the map and image tables, for the writer's memory: past them
// it forgets what it has defined and defines maps and images anew.
const (
	maxMapDict   = 4096
	maxImageDict = 1 << 16
)

// imageKey identifies an image apart from where it is mapped.
type imageKey struct {
	path, buildID      string
	textOffset, length uint64
}

// mapDict is the writer's side of the map and image tables.
type mapDict struct {
	maps    map[string]uint64 // a map's images and bases → map id
	nmaps   uint64
	images  map[imageKey]uint64
	nimages uint64
	key     []byte
}

func newMapDict() mapDict {
	return mapDict{maps: map[string]uint64{}, images: map[imageKey]uint64{}}
}

// appendMap appends the map field of a process record: a reference to an
// equal map defined before, or the definition of a new one.
func (d *mapDict) appendMap(dst []byte, m *cbf.ImageMap) []byte {
	d.key = d.key[:0]
	for _, im := range m.Images() {
		d.key = append(d.key, im.Path...)
		d.key = append(d.key, 0)
		d.key = append(d.key, im.BuildID...)
		d.key = binary.AppendUvarint(d.key, uint64(len(im.BuildID)))
		d.key = binary.LittleEndian.AppendUint64(d.key, im.Base)
		d.key = binary.LittleEndian.AppendUint64(d.key, im.EndOfText)
		d.key = binary.LittleEndian.AppendUint64(d.key, im.TextOffset)
	}
	if id, ok := d.maps[string(d.key)]; ok {
		return binary.AppendUvarint(dst, id+1)
	}
	if len(d.maps) >= maxMapDict {
		clear(d.maps)
	}
	d.maps[string(d.key)] = d.nmaps
	d.nmaps++
	dst = binary.AppendUvarint(dst, d.nmaps)
	dst = binary.AppendUvarint(dst, uint64(m.Len()))
	prev := uint64(0)
	for _, im := range m.Images() {
		k := imageKey{im.Path, string(im.BuildID), im.TextOffset, im.EndOfText - im.Base}
		if id, ok := d.images[k]; ok {
			dst = binary.AppendUvarint(dst, id+1)
		} else {
			if len(d.images) >= maxImageDict {
				clear(d.images)
			}
			d.images[k] = d.nimages
			d.nimages++
			dst = binary.AppendUvarint(dst, 0)
			dst = appendString(dst, im.Path)
			dst = binary.AppendUvarint(dst, uint64(len(im.BuildID)))
			dst = append(dst, im.BuildID...)
			dst = binary.AppendUvarint(dst, im.TextOffset)
			dst = binary.AppendUvarint(dst, k.length)
		}
		dst = appendBase(dst, im.Base-prev)
		prev = im.Base
	}
	return dst
}

// appendBase appends the difference between two bases of a map: in pages
// when it is a multiple of the page size (always, for what /proc/PID/maps
// shows), else in bytes after a marker.
func appendBase(dst []byte, d uint64) []byte {
	if d%pageSize == 0 {
		return binary.AppendUvarint(dst, d/pageSize<<1)
	}
	return binary.AppendUvarint(append(dst, 1), d)
}

// pageSize is the unit of base differences. 4096 is the smallest page
// size of the architectures Linux runs on; larger pages are multiples.
const pageSize = 4096

// parseBase reads what appendBase wrote; version 2 stored bytes.
func parseBase(p *payload) (uint64, error) {
	off := p.off
	v, err := p.uvarint("image base")
	switch {
	case err != nil || p.version == 2:
		return v, err
	case v == 1:
		return p.uvarint("image base")
	case v&1 != 0 || v>>1 > math.MaxUint64/pageSize:
		return 0, p.errorf(off, "image base", "%d is neither pages nor the byte marker", v)
	}
	return v >> 1 * pageSize, nil
}

// mapTable is the reader's side: the maps, images and containers that
// process records defined so far.
type mapTable struct {
	maps       []*cbf.ImageMap
	images     []cbf.Image // Base 0, EndOfText the text's length
	containers []string
	scratch    []cbf.Image
}

// pad grows the tables to the sizes a Tables chunk gives, with entries
// lost to damage: a nil map, an image of no text, an unknown container.
func (t *mapTable) pad(maps, images, containers int) {
	for len(t.maps) < maps {
		t.maps = append(t.maps, nil)
	}
	for len(t.images) < images {
		t.images = append(t.images, cbf.Image{})
	}
	for len(t.containers) < containers {
		t.containers = append(t.containers, "")
	}
}

// parseMap reads the map field of a process record. lost says the map was
// defined in a chunk lost to damage, or uses an image that was.
func (t *mapTable) parseMap(p *payload) (m *cbf.ImageMap, lost bool, err error) {
	off := p.off
	id, err := p.uvarint("image map")
	switch {
	case err != nil:
		return nil, false, err
	case id == 0:
		return nil, false, nil
	case id <= uint64(len(t.maps)):
		m := t.maps[id-1]
		return m, m == nil, nil
	case id > uint64(len(t.maps))+1:
		return nil, false, p.errorf(off, "image map", "map %d; %d are defined", id, len(t.maps))
	}
	off = p.off
	n, err := p.count("image count", 2)
	if err != nil {
		return nil, false, err
	}
	images := t.scratch[:0]
	base := uint64(0)
	for range n {
		im, err := t.parseImage(p)
		if err != nil {
			return nil, false, err
		}
		d, err := parseBase(p)
		if err != nil {
			return nil, false, err
		}
		base += d
		lost = lost || im.EndOfText == 0 // an image lost to damage
		im.Base, im.EndOfText = base, base+im.EndOfText
		if im.EndOfText < im.Base {
			return nil, false, p.errorf(off, "image map", "image %s at %#x runs past the end of the address space", im.Path, im.Base)
		}
		images = append(images, im)
	}
	t.scratch = images
	if lost {
		t.maps = append(t.maps, nil)
		return nil, true, nil
	}
	m, err = cbf.NewImageMap("", cbf.Word64, images)
	if err != nil {
		return nil, false, p.errorf(off, "image map", "%v", err)
	}
	t.maps = append(t.maps, m)
	return m, false, nil
}

// parseImage reads an image reference, or the definition of a new image,
// and returns the image at base 0.
func (t *mapTable) parseImage(p *payload) (cbf.Image, error) {
	off := p.off
	ref, err := p.uvarint("image")
	switch {
	case err != nil:
		return cbf.Image{}, err
	case ref > uint64(len(t.images)):
		return cbf.Image{}, p.errorf(off, "image", "image %d; %d are defined", ref, len(t.images))
	case ref > 0:
		return t.images[ref-1], nil
	}
	var im cbf.Image
	if im.Path, err = p.string("image path"); err != nil {
		return im, err
	}
	id, err := p.bytes("build ID", cbf.MaxBuildIDLen)
	if err != nil {
		return im, err
	}
	if len(id) > 0 {
		im.BuildID = slices.Clone(id)
	}
	if im.TextOffset, err = p.uvarint("text offset"); err != nil {
		return im, err
	}
	off = p.off
	if im.EndOfText, err = p.uvarint("text length"); err != nil {
		return im, err
	}
	if im.EndOfText == 0 {
		return im, p.errorf(off, "text length", "an image of no text")
	}
	t.images = append(t.images, im)
	return im, nil
}
