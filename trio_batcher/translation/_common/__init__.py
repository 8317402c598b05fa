"""The rules both OpenAI dialects (Chat Completions and Responses) share, written once.

Each validator takes the parameter path it reports a fault under (and, where its message
names the field, the name the client knows it by), so each dialect calls it with its own
paths -- ``messages[2].content[0].image_url.url`` on the Chat path, ``input[2].content[0]
.image_url`` on the Responses path -- and neither rewrites the other's messages.

- ``fields``: reading optional top-level fields, and ``Ignored``;
- ``params``: ``stop`` and the end user's id;
- ``content``: text, images and PDFs as Anthropic blocks, cache breakpoints;
- ``turns``: the turn builder (strict alternation, tool call pairing, the final prefill);
- ``tool_calls``: tool call ids and JSON arguments;
- ``tools``: function tools and the tool choice;
- ``structured_output``, ``strict_schema``: JSON schemas as Anthropic's grammar;
- ``reasoning``, ``sampling``, ``model_traits``: thinking, sampling and what each model takes;
- ``preflight``: what Anthropic would refuse of a translated body, checked before sending.
"""
