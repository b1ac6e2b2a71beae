// Package openai serves text generation over the OpenAI-compatible HTTP
// API that clients already speak: POST /v1/completions, POST
// /v1/chat/completions (with "stream": true as server-sent events: one
// "data: {chunk}" line per token, a final usage chunk when asked for,
// then "data: [DONE]"), and GET /v1/models, with errors in OpenAI's shape
// ({"error": {"message", "type", "param", "code"}}) and statuses.
//
// The package is the protocol only. What generates is a Generator, the
// consumer-owned interface a generation engine implements: it decodes one
// sequence and hands each token's text to the handler as it is made. The
// handler applies the stop sequences (holding back text that may be the
// start of one, so no client ever sees part of a stop), counts tokens,
// and cancels the sequence when its client goes away, so the engine frees
// it at its next step.
//
// Decoding is greedy, or sampled at a temperature with a seed; n, best_of,
// echo, suffix and logprobs other than their defaults are refused (400)
// rather than ignored, so a client never gets less than it asked for
// without knowing. Unknown fields are ignored, as OpenAI's clients send
// fields of newer API versions.
//
// Config.Authenticate says who a request comes from (Caller): its tenant,
// and the models its API key may use. A model outside them is 403
// (forbidden), checked before the model is looked up, so a restricted key
// learns nothing of the others, and GET /v1/models lists only its own: the
// same rule as the rest of the API's keys.
//
// Imported by: engine/generate (the live generation engine, a
// Generator), engine/server (which mounts the handler when generation is
// on). Its tests run the official openai npm client against it.
package openai
