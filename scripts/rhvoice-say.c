/* rhvoice-say: speaks `path<TAB>text` lines from stdin with one RHVoice voice, one WAV per line.
 *   rhvoice-say.exe DATA_DIR VOICE RELATIVE_RATE RELATIVE_PITCH < lines
 * Built with mingw-w64 against RHVoice.dll (RHVoice 1.14 C API); runs under Wine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

typedef int (*cb_rate)(int, void *);
typedef int (*cb_speech)(const short *, unsigned int, void *);
typedef int (*cb_mark)(const char *, void *);
typedef int (*cb_pos)(unsigned int, unsigned int, void *);
typedef int (*cb_audio)(const char *, void *);
typedef void (*cb_done)(void *);

typedef struct {
  cb_rate set_sample_rate;
  cb_speech play_speech;
  cb_mark process_mark;
  cb_pos word_starts, word_ends, sentence_starts, sentence_ends;
  cb_audio play_audio;
  cb_done done;
} callbacks;

typedef struct {
  const char *data_path;
  const char *config_path;
  const char **resource_paths;
  callbacks cbs;
  unsigned int options;
} init_params;

typedef struct {
  const char *voice_profile;
  double absolute_rate, absolute_pitch, absolute_volume;
  double relative_rate, relative_pitch, relative_volume;
  int punctuation_mode;
  const char *punctuation_list;
  int capitals_mode;
  int flags;
} synth_params;

typedef void *(*fn_new_engine)(const init_params *);
typedef void *(*fn_new_message)(void *, const char *, unsigned int, int, const synth_params *, void *);
typedef int (*fn_speak)(void *);
typedef void (*fn_delete_message)(void *);
typedef const char *(*fn_version)(void);

static short *samples;
static size_t count, capacity;
static int sample_rate = 24000;

static int on_rate(int rate, void *user) { (void)user; sample_rate = rate; return 1; }

static int on_speech(const short *s, unsigned int n, void *user) {
  (void)user;
  if (count + n > capacity) {
    capacity = (count + n) * 2;
    samples = realloc(samples, capacity * sizeof(short));
    if (!samples) return 0;
  }
  memcpy(samples + count, s, n * sizeof(short));
  count += n;
  return 1;
}

static void put32(FILE *f, unsigned int v) { fwrite(&v, 4, 1, f); }
static void put16(FILE *f, unsigned short v) { fwrite(&v, 2, 1, f); }

static int write_wav(const char *path) {
  char win[4096];
  /* A Unix absolute path is Z:\ under Wine. */
  snprintf(win, sizeof win, "%s%s", path[0] == '/' ? "Z:" : "", path);
  FILE *f = fopen(win, "wb");
  if (!f) return 0;
  unsigned int bytes = (unsigned int)(count * 2);
  fwrite("RIFF", 1, 4, f); put32(f, 36 + bytes); fwrite("WAVEfmt ", 1, 8, f);
  put32(f, 16); put16(f, 1); put16(f, 1); put32(f, sample_rate); put32(f, sample_rate * 2);
  put16(f, 2); put16(f, 16); fwrite("data", 1, 4, f); put32(f, bytes);
  fwrite(samples, 2, count, f);
  return fclose(f) == 0;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: rhvoice-say DATA_DIR VOICE RELATIVE_RATE RELATIVE_PITCH < path<TAB>text lines\n");
    return 2;
  }
  HMODULE lib = LoadLibraryA("RHVoice.dll");
  if (!lib) { fprintf(stderr, "RHVoice.dll: cannot load (error %lu)\n", GetLastError()); return 1; }
  fn_new_engine new_engine = (fn_new_engine)GetProcAddress(lib, "RHVoice_new_tts_engine");
  fn_new_message new_message = (fn_new_message)GetProcAddress(lib, "RHVoice_new_message");
  fn_speak speak = (fn_speak)GetProcAddress(lib, "RHVoice_speak");
  fn_delete_message delete_message = (fn_delete_message)GetProcAddress(lib, "RHVoice_delete_message");
  fn_version version = (fn_version)GetProcAddress(lib, "RHVoice_get_version");
  if (!new_engine || !new_message || !speak || !delete_message || !version) {
    fprintf(stderr, "RHVoice.dll: missing an entry point of the RHVoice C API\n");
    return 1;
  }
  if (strncmp(version(), "1.", 2) != 0) {
    fprintf(stderr, "RHVoice.dll: version %s, expected 1.x\n", version());
    return 1;
  }
  char data[4096], config[4096];
  snprintf(data, sizeof data, "%s%s", argv[1][0] == '/' ? "Z:" : "", argv[1]);
  snprintf(config, sizeof config, "%s", data);
  const char *resources[] = {NULL};
  init_params init;
  memset(&init, 0, sizeof init);
  init.data_path = data;
  init.config_path = config;
  init.resource_paths = resources;
  init.cbs.set_sample_rate = on_rate;
  init.cbs.play_speech = on_speech;
  void *engine = new_engine(&init);
  if (!engine) { fprintf(stderr, "RHVoice: no engine from data %s\n", data); return 1; }
  synth_params params;
  memset(&params, 0, sizeof params);
  params.voice_profile = argv[2];
  params.relative_rate = atof(argv[3]);
  params.relative_pitch = atof(argv[4]);
  params.relative_volume = 1.0;
  params.flags = 1; /* don't clip the rate */
  char line[8192];
  while (fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\r\n")] = 0;
    char *tab = strchr(line, '\t');
    if (!tab) { fprintf(stderr, "bad line (expected path<TAB>text): %s\n", line); return 1; }
    *tab = 0;
    const char *text = tab + 1;
    count = 0;
    void *msg = new_message(engine, text, (unsigned int)strlen(text), 0, &params, NULL);
    if (!msg) { fprintf(stderr, "RHVoice: cannot build a message for \"%s\"\n", text); return 1; }
    speak(msg);
    delete_message(msg);
    if (count == 0) { fprintf(stderr, "RHVoice: no audio for \"%s\" with %s\n", text, argv[2]); return 1; }
    if (!write_wav(line)) { fprintf(stderr, "%s: cannot write\n", line); return 1; }
  }
  return 0;
}
