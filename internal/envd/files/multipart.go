package files

import (
	"errors"
	"io"
	"mime"
	"mime/multipart"
)

func multipartReader(body io.Reader, params map[string]string) (*multipart.Reader, error) {
	boundary := params["boundary"]
	if boundary == "" {
		return nil, errors.New("multipart body without a boundary")
	}
	return multipart.NewReader(body, boundary), nil
}

// rawFileName is a part's filename exactly as sent. Part.FileName keeps only
// the last element, but the SDKs put the whole destination path there.
func rawFileName(disposition string) string {
	_, params, err := mime.ParseMediaType(disposition)
	if err != nil {
		return ""
	}
	return params["filename"]
}
