// Package flamegraph renders weighted call stacks as a flame graph: an SVG
// in which every frame is a box as wide as the share of samples that passed
// through it, callers below callees (or above, for an icicle graph).
//
// The SVG is self-contained — styles and a small script of our own are
// embedded — so it can be mailed, attached to a ticket or opened from disk
// in any browser: click a frame to zoom into it, search by regular
// expression (Ctrl-F or the Search button, or ?s=term in the URL) with the
// share of samples matched, open zoomed into a function with ?z=name, and hover for counts and percentages. Frames
// are coloured by kind (user, kernel, inlined, unsymbolized, synthetic) so
// a kernel-heavy or poorly symbolized profile is obvious at a glance, and
// frames too narrow to draw are left out with a note saying how much was
// hidden.
//
// The layout follows the conventions of Brendan Gregg's flamegraph.pl
// (siblings sorted by name, 1200 px wide, 16 px frames, 0.1 px minimum
// width) so the pictures read the same; the code is sprof's own.
package flamegraph
