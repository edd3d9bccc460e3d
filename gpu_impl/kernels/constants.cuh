// Generated from gpu_impl/layout.py (CONSTANTS, STAT_COLUMNS) (write_constants_header): edit the
// tables there; tests/test_gpu_layout.py checks that this file is what they generate.
#pragma once

#define ERR_BAD_LOGPROB 0x1u  // a NaN or +inf logprob
#define ERR_DUPLICATE 0x2u  // a token twice in one row
#define ERR_OVERFLOW 0x4u  // a workspace too small for the candidates
#define ERR_BAD_TOKEN 0x8u  // a negative int32 token other than -1
#define KIND_AT_NODE 0x0u  // a hypothesis at a node (off = the edge's length)
#define KIND_MID 0x1u  // a hypothesis inside a linked edge (aux = the suffix index of the next token)
#define KIND_LINKED_OFF 0x2u  // a start inside a linked edge (aux = tokens of the edge consumed)
#define NO_NODE 0xffffffffu  // no node: a prefix not in the trie
#define STAT_FRONTIER_CANDS 0  // candidates with a child the frontier was selected from (0 at the last step)
#define STAT_POOL_CANDS 1  // whole keywords offered to the pool that beat its worst entry
#define STAT_CHUNKS 2  // 32-item work chunks of the intersection
#define STAT_LIVE 3  // queries that expanded a frontier at step t (after the early stop)
#define NUM_STATS 4
