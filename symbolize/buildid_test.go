package symbolize

import "github.com/sprof/sprof/symbolize/buildid"

func buildIDOf(path string) (string, error) { return buildid.File(path) }
