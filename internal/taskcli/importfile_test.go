package taskcli

import (
	"reflect"
	"strings"
	"testing"
)

// TestParseImportJSON ensures a JSON import file is read entry by entry, its dependencies on
// earlier keys resolved to their entries and tsk_ ids kept as they are.
func TestParseImportJSON(t *testing.T) {
	data := `[
  {"key": "schema", "title": "Add the schema", "body": "tables a and b", "labels": ["db"], "paths": ["db/"], "priority": 2},
  {"title": "Write the API", "depends_on": ["schema", "tsk_01EXISTING"]},
  {"key": "ui", "title": "  The UI  ", "depends_on": ["schema"], "paths": ["web/", "api.go"]}
]`
	got, err := ParseImport("plan.json", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	want := []ImportTask{
		{Key: "schema", Title: "Add the schema", Body: "tables a and b", Labels: []string{"db"}, Paths: []string{"db/"}, Priority: 2, Where: "plan.json: entry 1"},
		{Title: "Write the API", DependsOn: []TaskRef{{Index: 0}, {Index: -1, ID: "tsk_01EXISTING"}}, Where: "plan.json: entry 2"},
		{Key: "ui", Title: "The UI", DependsOn: []TaskRef{{Index: 0}}, Paths: []string{"web/", "api.go"}, Where: "plan.json: entry 3"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseImport:\n got %+v\nwant %+v", got, want)
	}
	// A file named otherwise is JSON when it starts with [.
	if got, err := ParseImport("plan.txt", []byte(" \n[{\"title\": \"x\"}]")); err != nil || len(got) != 1 || got[0].Title != "x" {
		t.Errorf("a JSON array in plan.txt: %+v, %v", got, err)
	}
}

// TestParseImportMarkdown ensures each top-level list item of a Markdown file is a task, its
// indented lines its body but for the lines that say its dependencies (item numbers or tsk_
// ids), labels, paths and priority, and that what is not an item (headings, paragraphs, code
// blocks) is no task.
func TestParseImportMarkdown(t *testing.T) {
	md := "# The plan\n" +
		"\n" +
		"Some words about it.\n" +
		"\n" +
		"- [ ] Add the schema\n" +
		"  Tables a and b,\n" +
		"    with an index.\n" +
		"\n" +
		"  labels: db, schema\n" +
		"  paths: db/, migrations/001.sql\n" +
		"  priority: 3\n" +
		"- Write the API\n" +
		"  Depends on: 1, tsk_01EXISTING\n" +
		"\n" +
		"```\n" +
		"- not a task, in a code block\n" +
		"```\n" +
		"3. The UI\n" +
		"\t- depends on: #1, 2\n" +
		"\t- a sub-item of its body\n" +
		"* [ ] Docs\r\n"
	got, err := ParseImport("plan.md", []byte(md))
	if err != nil {
		t.Fatal(err)
	}
	want := []ImportTask{
		{Key: "1", Title: "Add the schema", Body: "Tables a and b,\n  with an index.", Labels: []string{"db", "schema"},
			Paths: []string{"db/", "migrations/001.sql"}, Priority: 3, Where: "plan.md:5"},
		{Key: "2", Title: "Write the API", DependsOn: []TaskRef{{Index: 0}, {Index: -1, ID: "tsk_01EXISTING"}}, Where: "plan.md:12"},
		{Key: "3", Title: "The UI", Body: "- a sub-item of its body", DependsOn: []TaskRef{{Index: 0}, {Index: 1}}, Where: "plan.md:18"},
		{Key: "4", Title: "Docs", Where: "plan.md:21"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseImport:\n got %+v\nwant %+v", got, want)
	}
}

// TestParseImportRefuses ensures a file that cannot be imported whole is refused before
// anything is created, saying where and why: a reference to a later or unknown entry, a
// duplicate key, an empty or multi-line title, unknown fields, a checked item, no task at all.
func TestParseImportRefuses(t *testing.T) {
	for _, c := range []struct {
		name, file, data, want string
	}{
		{"json later key", "p.json", `[{"key":"a","title":"A","depends_on":["b"]},{"key":"b","title":"B"}]`, `p.json: entry 1: depends on "b", which is not before it`},
		{"json self", "p.json", `[{"key":"a","title":"A","depends_on":["a"]}]`, "which is not before it"},
		{"json unknown key", "p.json", `[{"title":"A","depends_on":["nope"]}]`, `depends on "nope", neither the key of an earlier entry nor a task id`},
		{"json duplicate key", "p.json", `[{"key":"a","title":"A"},{"key":"a","title":"B"}]`, `p.json: entry 2: key "a" is entry 1's already`},
		{"json key like an id", "p.json", `[{"key":"tsk_1","title":"A"}]`, "starts with tsk_"},
		{"json unknown field", "p.json", `[{"title":"A","dependson":["x"]}]`, `unknown field "dependson"`},
		{"json empty title", "p.json", `[{"title":"A"},{"title":"  "}]`, "p.json: entry 2: the title is empty"},
		{"json two-line title", "p.json", `[{"title":"A\nB"}]`, "more than one line"},
		{"json not an array", "p.json", `{"title":"A"}`, "want a JSON array"},
		{"json trailing", "p.json", `[{"title":"A"}] [1]`, "something follows"},
		{"json empty", "p.json", `[]`, "holds no task"},
		{"json priority", "p.json", `[{"title":"A","priority":1e12}]`, "p.json"},
		{"json long title", "p.json", `[{"title":"` + strings.Repeat("x", 201) + `"}]`, "201 characters, more than 200"},
		{"md later item", "p.md", "- A\n  depends on: 2\n- B\n", "p.md:1: item 1 depends on item 2, which is not before it"},
		{"md self", "p.md", "- A\n- B\n  depends on: 2\n", "item 2 depends on item 2"},
		{"md no such item", "p.md", "- A\n  depends on: 7\n", "depends on item 7, but the file has items 1 to 1"},
		{"md not a number", "p.md", "- A\n- B\n  depends on: the first\n", `p.md:2: depends on "the"`},
		{"md priority", "p.md", "- A\n  priority: high\n", `p.md:2: priority "high" is not a number`},
		{"md checked", "p.md", "- [ ] A\n- [x] B\n", "p.md:2: the item is checked"},
		{"md empty title", "p.md", "- A\n- [ ]  \n", "the title is empty"},
		{"md nothing", "p.md", "# Just a heading\n\nand words.\n", "holds no task"},
		{"not UTF-8", "p.md", "- \xff\n", "not UTF-8"},
	} {
		got, err := ParseImport(c.file, []byte(c.data))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ParseImport = %+v, %v; want an error saying %q", c.name, got, err, c.want)
		}
	}
}
