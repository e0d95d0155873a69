package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
)

// ReadResponse reads an answer from br as http.ReadResponse(br, nil) does,
// and the plain case, which is most answers, with less work: HTTP/1.1, a
// status with a body of a Content-Length, header lines taken as they are
// (parseHead's rules), no Transfer-Encoding or Trailer. The answer's body
// reads from br and needs no Close. Anything else is read by
// http.ReadResponse itself.
func ReadResponse(br *bufio.Reader) (*http.Response, error) {
	for {
		buf, _ := br.Peek(br.Buffered())
		if i := bytes.Index(buf, headEnd); i >= 0 {
			head := buf[:i+len(headEnd)]
			resp, ok := parseAnswer(head)
			if !ok {
				return http.ReadResponse(br, nil)
			}
			_, _ = br.Discard(len(head))
			if resp.ContentLength == 0 {
				resp.Body = http.NoBody
			} else {
				resp.Body = &answerBody{br: br, left: resp.ContentLength}
			}
			return resp, nil
		}
		if br.Buffered() == br.Size() {
			return http.ReadResponse(br, nil)
		}
		if _, err := br.Peek(br.Buffered() + 1); err != nil {
			if br.Buffered() > 0 {
				// A head cut short: http.ReadResponse says how.
				return http.ReadResponse(br, nil)
			}
			return nil, err
		}
	}
}

// parseAnswer parses a plain answer's head, or reports false.
func parseAnswer(b []byte) (*http.Response, bool) {
	line, rest, ok := bytes.Cut(b, crlf)
	if !ok || len(line) < len("HTTP/1.1 200") || string(line[:len("HTTP/1.1 ")]) != "HTTP/1.1 " {
		return nil, false
	}
	code := line[len("HTTP/1.1 "):]
	if len(code) > 3 && code[3] != ' ' || !digits(string(code[:3])) || code[0] < '2' {
		return nil, false
	}
	status := int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	if !bodyAllowed(status) || !plainValue(code) {
		return nil, false
	}
	all := string(b)
	resp := &http.Response{StatusCode: status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, ContentLength: -1}
	resp.Status = all[len("HTTP/1.1 ") : len("HTTP/1.1 ")+len(code)]
	hdr, ok := parseFields(b, rest, all, "", func(name, value string) bool {
		switch name {
		case "Content-Length":
			if resp.ContentLength >= 0 || !digits(value) {
				return false
			}
			resp.ContentLength = parseLength(value)
		case "Transfer-Encoding", "Trailer":
			return false
		case "Connection":
			closes, ok := connection(value)
			resp.Close = resp.Close || closes
			return ok
		}
		return true
	})
	if !ok || resp.ContentLength < 0 {
		return nil, false
	}
	if resp.Close {
		delete(hdr, "Connection") // as net/http, which acts on it
	}
	resp.Header = hdr
	return resp, true
}

// answerBody is an answer's body of a known length.
type answerBody struct {
	br   *bufio.Reader
	left int64
}

func (b *answerBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	b.left -= int64(n)
	if b.left == 0 {
		return n, io.EOF
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *answerBody) Close() error { return nil }
