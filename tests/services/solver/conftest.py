from tests.kz_common.llm.conftest import lora_adapter, tiny_model  # noqa: F401  (shared fixtures)
