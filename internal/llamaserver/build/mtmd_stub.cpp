// A text-only stand-in for llama.cpp's libmtmd (image and audio input), used
// by build.sh so that llama-server links without compiling the multimodal
// library. llama-server reaches libmtmd only when started with --mmproj;
// the tests never pass it. Every entry point that would need real
// multimodal support says so on stderr and fails or aborts.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "mtmd.h"
#include "mtmd-helper.h"

[[noreturn]] static void unsupported(const char * fn) {
    fprintf(stderr, "llama-server built by OpenStarry's build.sh is text-only: %s needs libmtmd\n", fn);
    abort();
}

extern "C" {

struct mtmd_context_params mtmd_context_params_default(void) {
    struct mtmd_context_params p;
    memset(&p, 0, sizeof(p));
    p.use_gpu = false;
    p.n_threads = 1;
    p.media_marker = "<__media__>";
    p.image_marker = "<__image__>";
    p.image_min_tokens = -1;
    p.image_max_tokens = -1;
    p.batch_max_tokens = 1024;
    return p;
}
struct mtmd_helper_init_opt mtmd_helper_init_opt_default(void) {
    struct mtmd_helper_init_opt o;
    memset(&o, 0, sizeof(o));
    return o;
}
void mtmd_helper_log_set(ggml_log_callback, void *) {}
mtmd_context * mtmd_init_from_file(const char *, const struct llama_model *, const struct mtmd_context_params) {
    fprintf(stderr, "llama-server built by OpenStarry's build.sh is text-only: --mmproj is not supported\n");
    return nullptr;
}
struct mtmd_caps mtmd_get_cap_from_file(const char *) { return mtmd_caps{false, false}; }
void mtmd_free(mtmd_context *) {}
bool mtmd_support_vision(const mtmd_context *) { return false; }
bool mtmd_support_audio(const mtmd_context *) { return false; }
bool mtmd_helper_support_video(const mtmd_context *) { return false; }

mtmd_batch * mtmd_batch_init(mtmd_context *) { unsupported(__func__); }
void mtmd_batch_free(mtmd_batch *) {}
int32_t mtmd_batch_add_chunk(mtmd_batch *, const mtmd_input_chunk *) { unsupported(__func__); }
int32_t mtmd_batch_encode(mtmd_batch *) { unsupported(__func__); }
float * mtmd_batch_get_output_embd(mtmd_batch *, const mtmd_input_chunk *) { unsupported(__func__); }
void mtmd_bitmap_free(mtmd_bitmap *) {}
void mtmd_helper_video_free(mtmd_helper_video *) {}
struct mtmd_helper_bitmap_wrapper mtmd_helper_bitmap_init_from_buf(const mtmd_context *, const unsigned char *, size_t, bool, struct mtmd_helper_init_opt) {
    return mtmd_helper_bitmap_wrapper{nullptr, nullptr};
}
int32_t mtmd_helper_decode_image_chunk(mtmd_context *, struct llama_context *, const mtmd_input_chunk *, float *, llama_pos, llama_seq_id, int32_t, llama_pos *, mtmd_helper_post_decode_callback, void *) { unsupported(__func__); }
mtmd_input_chunks * mtmd_input_chunks_init(void) { unsupported(__func__); }
size_t mtmd_input_chunks_size(const mtmd_input_chunks *) { return 0; }
const mtmd_input_chunk * mtmd_input_chunks_get(const mtmd_input_chunks *, size_t) { unsupported(__func__); }
void mtmd_input_chunks_free(mtmd_input_chunks *) {}
int32_t mtmd_tokenize(const mtmd_context *, mtmd_input_chunks *, const mtmd_input_text *, const mtmd_bitmap * const *, size_t) { unsupported(__func__); }
enum mtmd_input_chunk_type mtmd_input_chunk_get_type(const mtmd_input_chunk *) { unsupported(__func__); }
const llama_token * mtmd_input_chunk_get_tokens_text(const mtmd_input_chunk *, size_t *) { unsupported(__func__); }
size_t mtmd_input_chunk_get_n_tokens(const mtmd_input_chunk *) { unsupported(__func__); }
const char * mtmd_input_chunk_get_id(const mtmd_input_chunk *) { unsupported(__func__); }
llama_pos mtmd_input_chunk_get_n_pos(const mtmd_input_chunk *) { unsupported(__func__); }
mtmd_input_chunk * mtmd_input_chunk_copy(const mtmd_input_chunk *) { unsupported(__func__); }
void mtmd_input_chunk_free(mtmd_input_chunk *) {}
mtmd_input_chunk * mtmd_input_chunk_get_placeholder(const mtmd_input_chunk *) { unsupported(__func__); }
int32_t mtmd_input_chunk_save(const mtmd_input_chunk *, char *, size_t, size_t *) { unsupported(__func__); }
mtmd_input_chunk * mtmd_input_chunk_load(const char *, size_t) { unsupported(__func__); }

} // extern "C"

std::map<ggml_backend_dev_t, size_t> mtmd_get_memory_usage(const char *, struct mtmd_context_params) { return {}; }
