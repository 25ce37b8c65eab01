package taskcli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ag-coord/ag/internal/termsafe"
)

// ImportTask is one task of an import file, as `ag task import` creates it.
type ImportTask struct {
	Key      string // the JSON entry's key, or the Markdown item's number
	Title    string
	Body     string
	Labels   []string
	Paths    []string
	Priority int32
	// DependsOn are the tasks it waits for: earlier entries of the file, or existing tasks.
	DependsOn []TaskRef
	// Where names the entry for errors: "FILE:LINE" or "FILE: entry N".
	Where string
}

// TaskRef is a dependency of an imported task: an earlier entry of the file (Index, 0-based),
// or an existing task (ID, Index -1).
type TaskRef struct {
	Index int
	ID    string
}

// Limits checked before anything is created, as the server checks them: an import must not
// stop half-way on what the file alone says.
const (
	maxTitleRunes = 200
	maxDepends    = 32
	maxLabels     = 16
	maxPaths      = 64
	maxBodyBytes  = 16 << 10
)

// ParseImport reads an import file: a JSON array of tasks when it starts with "[" (or its name
// ends in .json), else a Markdown list (docs/cli.md, "ag task import"). Every reference is
// checked: a task depends only on entries before it or on tsk_ ids.
func ParseImport(name string, data []byte) ([]ImportTask, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%s is not UTF-8 text", name)
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n\ufeff")
	var tasks []ImportTask
	var err error
	if strings.EqualFold(filepath.Ext(name), ".json") || bytes.HasPrefix(trimmed, []byte("[")) {
		tasks, err = parseJSON(name, data)
	} else {
		tasks, err = parseMarkdown(name, string(data))
	}
	if err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("%s holds no task: a JSON array of {\"title\": ...}, or a Markdown list (- Title)", name)
	}
	for _, t := range tasks {
		if err := t.check(); err != nil {
			return nil, fmt.Errorf("%s: %w", t.Where, err)
		}
	}
	return tasks, nil
}

// check refuses what the server would refuse of a task alone.
func (t ImportTask) check() error {
	switch n := utf8.RuneCountInString(t.Title); {
	case strings.TrimSpace(t.Title) == "":
		return errors.New("the title is empty")
	case strings.ContainsAny(t.Title, "\r\n"):
		return errors.New("the title is more than one line: put the rest in the body")
	case n > maxTitleRunes:
		return fmt.Errorf("the title is %d characters, more than %d: put the rest in the body", n, maxTitleRunes)
	case len(t.Body) > maxBodyBytes:
		return fmt.Errorf("the body is %d bytes, more than %d", len(t.Body), maxBodyBytes)
	case len(t.DependsOn) > maxDepends:
		return fmt.Errorf("it depends on %d tasks, more than %d", len(t.DependsOn), maxDepends)
	case len(t.Labels) > maxLabels:
		return fmt.Errorf("it has %d labels, more than %d", len(t.Labels), maxLabels)
	case len(t.Paths) > maxPaths:
		return fmt.Errorf("it has %d paths, more than %d", len(t.Paths), maxPaths)
	}
	return nil
}

// jsonTask is one entry of a JSON import file.
type jsonTask struct {
	Key       string   `json:"key"`
	Title     string   `json:"title"`
	Body      string   `json:"body"`
	Labels    []string `json:"labels"`
	Paths     []string `json:"paths"`
	DependsOn []string `json:"depends_on"`
	Priority  int32    `json:"priority"`
}

func parseJSON(name string, data []byte) ([]ImportTask, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var entries []jsonTask
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("%s: %v (want a JSON array of {\"key\", \"title\", \"body\", \"labels\", \"paths\", \"depends_on\", \"priority\"})", name, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: something follows the JSON array", name)
	}
	keys := map[string]int{}
	tasks := make([]ImportTask, 0, len(entries))
	for i, e := range entries {
		where := fmt.Sprintf("%s: entry %d", name, i+1)
		if e.Key != "" {
			if strings.HasPrefix(e.Key, "tsk_") {
				return nil, fmt.Errorf("%s: key %q starts with tsk_, as task ids do: choose another", where, termsafe.Line(e.Key))
			}
			if j, ok := keys[e.Key]; ok {
				return nil, fmt.Errorf("%s: key %q is entry %d's already", where, termsafe.Line(e.Key), j+1)
			}
		}
		t := ImportTask{Key: e.Key, Title: strings.TrimSpace(e.Title), Body: e.Body, Labels: e.Labels, Paths: e.Paths, Priority: e.Priority, Where: where}
		for _, d := range e.DependsOn {
			switch j, ok := keys[d]; {
			case ok:
				t.DependsOn = append(t.DependsOn, TaskRef{Index: j})
			case strings.HasPrefix(d, "tsk_"):
				t.DependsOn = append(t.DependsOn, TaskRef{Index: -1, ID: d})
			case laterKey(entries[i:], d):
				return nil, fmt.Errorf("%s: depends on %q, which is not before it in the file: list what a task depends on first", where, termsafe.Line(d))
			default:
				return nil, fmt.Errorf("%s: depends on %q, neither the key of an earlier entry nor a task id (tsk_...)", where, termsafe.Line(d))
			}
		}
		if e.Key != "" {
			keys[e.Key] = i
		}
		tasks = append(tasks, t)
	}
	return tasks, nil
}

// laterKey reports whether key is the key of one of entries.
func laterKey(entries []jsonTask, key string) bool {
	for _, e := range entries {
		if e.Key == key {
			return true
		}
	}
	return false
}

var (
	// listItem is a top-level Markdown list item: "- ", "* ", "+ " or "1. ", "1) ", then an
	// optional check box.
	listItem = regexp.MustCompile(`^(?:[-*+]|[0-9]{1,9}[.)])[ \t]+(?:\[([ xX])\][ \t]+)?(.*)$`)
	// metaLine is a line of an item that says something of the task rather than being its body,
	// perhaps as a list item of its own.
	metaLine = regexp.MustCompile(`(?i)^(?:[-*+][ \t]+)?(depends[ \t]+on|labels|paths|priority)[ \t]*:[ \t]*(.*)$`)
)

// mdItem is a Markdown item being read.
type mdItem struct {
	task ImportTask
	deps []string // as written, resolved once every item is known
	line int
	body []string
}

func parseMarkdown(name, text string) ([]ImportTask, error) {
	var items []*mdItem
	var cur *mdItem
	fence := ""
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	for n, line := range lines {
		where := fmt.Sprintf("%s:%d", name, n+1)
		indented := strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t")
		trimmed := strings.TrimSpace(line)
		if !indented && fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")) {
			// A code block outside an item: nothing in it is a task.
			fence, cur = trimmed[:3], nil
			continue
		}
		if fence != "" {
			if !indented && strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if !indented {
			m := listItem.FindStringSubmatch(line)
			if m == nil {
				if trimmed != "" {
					cur = nil // a heading or a paragraph ends the item before it
				}
				continue
			}
			if m[1] == "x" || m[1] == "X" {
				return nil, fmt.Errorf("%s: the item is checked ([x]), as work done: remove it, or uncheck it to import it", where)
			}
			cur = &mdItem{line: n + 1, task: ImportTask{Key: strconv.Itoa(len(items) + 1), Title: strings.TrimSpace(m[2]), Where: where}}
			items = append(items, cur)
			continue
		}
		if cur == nil {
			continue
		}
		if m := metaLine.FindStringSubmatch(trimmed); m != nil {
			if err := cur.meta(strings.ToLower(strings.Join(strings.Fields(m[1]), " ")), m[2]); err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			continue
		}
		cur.body = append(cur.body, line)
	}
	tasks := make([]ImportTask, 0, len(items))
	for i, it := range items {
		it.task.Body = dedent(it.body)
		for _, d := range it.deps {
			if strings.HasPrefix(d, "tsk_") {
				it.task.DependsOn = append(it.task.DependsOn, TaskRef{Index: -1, ID: d})
				continue
			}
			k, err := strconv.Atoi(strings.TrimPrefix(d, "#"))
			switch {
			case err != nil:
				return nil, fmt.Errorf("%s: depends on %q: write item numbers (1, 3) or task ids (tsk_...)", it.task.Where, termsafe.Line(d))
			case k < 1 || k > len(items):
				return nil, fmt.Errorf("%s: depends on item %d, but the file has items 1 to %d", it.task.Where, k, len(items))
			case k-1 >= i:
				return nil, fmt.Errorf("%s: item %d depends on item %d, which is not before it in the file: list what a task depends on first", it.task.Where, i+1, k)
			}
			it.task.DependsOn = append(it.task.DependsOn, TaskRef{Index: k - 1})
		}
		tasks = append(tasks, it.task)
	}
	return tasks, nil
}

// meta takes one "key: value" line of an item.
func (it *mdItem) meta(key, value string) error {
	switch key {
	case "depends on":
		it.deps = append(it.deps, splitList(value)...)
	case "labels":
		it.task.Labels = append(it.task.Labels, splitList(value)...)
	case "paths":
		it.task.Paths = append(it.task.Paths, splitList(value)...)
	case "priority":
		p, err := strconv.ParseInt(strings.TrimSpace(value), 10, 32)
		if err != nil {
			return fmt.Errorf("priority %q is not a number", termsafe.Line(value))
		}
		it.task.Priority = int32(p)
	}
	return nil
}

// splitList splits "a, b c" on commas and spaces.
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
}

// dedent answers an item's indented lines as its body: their common indentation removed,
// blank lines around it dropped.
func dedent(lines []string) string {
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " \t"))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		if len(l) >= indent && indent > 0 {
			l = l[indent:]
		} else {
			l = strings.TrimLeft(l, " \t")
		}
		out[i] = strings.TrimRight(l, " \t")
	}
	return strings.Join(out, "\n")
}
