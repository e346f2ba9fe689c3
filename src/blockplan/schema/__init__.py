"""The driving schema: scaffold compiler, tokenizers, prompt rendering and strict parser.

schema = default_schema()
tokenizer = default_tokenizer()                      # or load_tokenizer("tokenizer.json")
scaffold = compile_scaffold(schema, tokenizer, block_size=32)
ids, report = encode_answer(answer, scaffold, tokenizer, schema)    # training targets
answer = parse_answer(ids, scaffold, tokenizer, schema)             # strict
prompt = render_prompt(observation, tokenizer, schema, cameras, num_frames, tokens_per_image)

The robot's action schema (chunks of bin tokens) is `blockplan.schema.action`.
"""

from blockplan.schema.answer import render_answer_text
from blockplan.schema.codec import EncodeReport, ScaffoldParseError, encode_answer, parse_answer
from blockplan.schema.corpus import build_default_tokenizer, default_corpus
from blockplan.schema.layout import (
    DEFAULT_BLOCK_SIZE,
    SECTION_NAMES,
    Block,
    ImageSpan,
    PromptLayout,
    Scaffold,
    Section,
    Tokenizer,
)
from blockplan.schema.prompt import (
    IMAGE_PLACEHOLDER,
    PromptText,
    ego_history_array,
    render_prompt,
    render_prompt_text,
)
from blockplan.schema.scaffold import compile_scaffold, section_index
from blockplan.schema.spec import (
    DrivingSchema,
    SchemaError,
    default_schema,
    fastddrive_schema,
    format_number,
    schema_from_dict,
    schema_to_dict,
)
from blockplan.schema.tokenizer import (
    SPECIAL_TOKENS,
    JsonTokenizer,
    default_tokenizer,
    default_tokenizer_path,
    load_tokenizer,
    train_tokenizer,
)

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "IMAGE_PLACEHOLDER",
    "SECTION_NAMES",
    "SPECIAL_TOKENS",
    "Block",
    "DrivingSchema",
    "EncodeReport",
    "ImageSpan",
    "JsonTokenizer",
    "PromptLayout",
    "PromptText",
    "Scaffold",
    "ScaffoldParseError",
    "SchemaError",
    "Section",
    "Tokenizer",
    "build_default_tokenizer",
    "compile_scaffold",
    "default_corpus",
    "default_schema",
    "fastddrive_schema",
    "default_tokenizer",
    "default_tokenizer_path",
    "ego_history_array",
    "encode_answer",
    "format_number",
    "load_tokenizer",
    "parse_answer",
    "render_answer_text",
    "render_prompt",
    "render_prompt_text",
    "schema_from_dict",
    "schema_to_dict",
    "section_index",
    "train_tokenizer",
]
