package buildid

// Valid reports whether id is spelled as this package returns build IDs:
// lower-case hex of a sensible length. Callers that put an ID into a file
// name or a URL check it first, so an ID never walks out of a directory.
func Valid(id string) bool {
	if len(id) < 4 || len(id) > 2*maxIDLen {
		return false
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
