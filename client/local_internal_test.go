package client

import "testing"

func TestOnThisMachine(t *testing.T) {
	for url, want := range map[string]bool{
		"http://127.0.0.1:7777":        true,
		"http://127.3.4.5:7777":        true,
		"http://localhost:7777/":       true,
		"https://[::1]:7777":           true,
		"http://10.0.0.7:7777":         false,
		"https://ag.example.com":       false,
		"http://localhost.example.com": false,
		"http://[::ffff:10.0.0.1]:80":  false,
		"::not a url":                  false,
	} {
		if got := onThisMachine(url); got != want {
			t.Errorf("onThisMachine(%q) = %v, want %v", url, got, want)
		}
	}
}
