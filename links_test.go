package sluice

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// markdownLink finds inline links and images: [text](target) and ![alt](target).
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestMarkdownLinksResolveInsideTheRepository: every relative link of every
// Markdown file names a file or directory of this repository (and, for a
// link into a Markdown file, a heading it has), so no page points at a file
// only its authors' machine has.
func TestMarkdownLinksResolveInsideTheRepository(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{} // Markdown file -> its heading anchors
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := map[string]bool{}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range outsideCode(string(data)) {
			if h, ok := strings.CutPrefix(line, "#"); ok {
				a[headingAnchor(strings.TrimLeft(h, "#"))] = true
			}
		}
		anchors[path] = a
		return a
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, line := range outsideCode(string(data)) {
			for _, m := range markdownLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, anchor, _ := strings.Cut(target, "#")
				dest := path
				if file != "" {
					dest = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
				}
				if inside, _ := filepath.Rel(root, dest); inside == ".." || strings.HasPrefix(inside, ".."+string(filepath.Separator)) {
					t.Errorf("%s: link %s leaves the repository", rel, target)
					continue
				}
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %s: no such file in the repository", rel, target)
					continue
				}
				if anchor != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(dest)[anchor] {
					t.Errorf("%s: link %s: no heading with anchor #%s", rel, target, anchor)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// README alone has a dozen links: a walk that found none is broken.
	if checked < 20 {
		t.Fatalf("checked %d relative links; the walk must have missed the Markdown files", checked)
	}
}

// outsideCode returns the lines of a Markdown document outside fenced code
// blocks, where a "# comment" is not a heading and "[i](x)" not a link.
func outsideCode(doc string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

// headingAnchor is the anchor GitHub gives a heading: lower case, spaces to
// hyphens, punctuation other than hyphens and underscores dropped.
func headingAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
