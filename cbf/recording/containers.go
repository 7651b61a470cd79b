package recording

import "encoding/binary"

// Container names are stored once per recording, like maps: every process
// of a container carries the same 64-digit ID, and a busy host starts
// thousands of them. A processes chunk carries them after its records, so
// readers written before containers were recorded read such chunks
// unchanged (they ignore what follows the fields they know). See
// cbf/FORMAT.md §4.1.

// maxContainerDict bounds the writer's memory: past it, it forgets the
// names it has defined and defines them anew.
const maxContainerDict = 4096

// containerDict is the writer's side of the container table.
type containerDict struct {
	ids map[string]uint64
	n   uint64
}

// appendContainers appends the container fields of a processes chunk
// whose records are in the containers of names, one per record, or nothing
// when none of them is in a known container.
func (d *containerDict) appendContainers(dst []byte, names []string) []byte {
	n := len(names)
	for n > 0 && names[n-1] == "" {
		n--
	}
	if n == 0 {
		return dst
	}
	if d.ids == nil {
		d.ids = map[string]uint64{}
	}
	dst = binary.AppendUvarint(dst, uint64(n))
	for _, c := range names[:n] {
		if c == "" {
			dst = append(dst, 0)
			continue
		}
		if id, ok := d.ids[c]; ok {
			dst = binary.AppendUvarint(dst, id+1)
			continue
		}
		if len(d.ids) >= maxContainerDict {
			clear(d.ids)
		}
		d.ids[c] = d.n
		d.n++
		dst = binary.AppendUvarint(dst, d.n)
		dst = appendStringMax(dst, c, MaxContainer)
	}
	return dst
}

// parseContainers reads the container fields that follow the records of a
// processes chunk, adding the names they define to the table.
func (t *mapTable) parseContainers(p *payload, procs []Process) error {
	off := p.off
	n, err := p.uvarint("container count")
	if err != nil {
		return err
	}
	if n > uint64(len(procs)) {
		return p.errorf(off, "container count", "%d containers for %d process records", n, len(procs))
	}
	for i := range procs[:n] {
		off := p.off
		id, err := p.uvarint("container")
		switch {
		case err != nil:
			return err
		case id == 0:
		case id <= uint64(len(t.containers)):
			procs[i].Container = t.containers[id-1]
		case id > uint64(len(t.containers))+1:
			return p.errorf(off, "container", "container %d; %d are defined", id, len(t.containers))
		default:
			c, err := p.stringMax("container", MaxContainer)
			if err != nil {
				return err
			}
			t.containers = append(t.containers, c)
			procs[i].Container = c
		}
	}
	return nil
}
