/*
 * hush_example: keyword spotting in a WAV file through libhush_device's C API, as an
 * app would stream a microphone: open the model package, push the samples 20 ms at a
 * time, print each detection, close. It also checks that the API answers misuse (a NULL
 * path, a wrong sample rate, a closed handle) with status codes and messages.
 *
 *   usage: hush_example MODEL_DIR FILE.wav
 *
 * Output, one line each:
 *   api <major>.<minor>
 *   refused <STATUS_NAME>: <message>              (each misuse, as expected)
 *   detection <time_s> <label> <label_index> <score>
 *   summary <detections> detections in <seconds> s
 * Exit status 0 when every call returned what it should, 1 otherwise.
 *
 * Build (firmware-notes/c-api.md; device/capi/tests/c_example.rs does this):
 *   cc -std=c99 -Wall -Wextra -pedantic -I device/capi/include \
 *      device/capi/examples/hush_example.c target/release/libhush_device.a \
 *      -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc -Wl,-z,noexecstack -o hush_example
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hush_device.h"

/* Samples per push: 20 ms at 16 kHz, what a microphone callback delivers. */
#define CHUNK 320
/* Detections taken per push. */
#define ROOM 4

static int failures = 0;

/* Checks that `got` is `want`; a failure expected is printed with its message. */
static void expect(HushStatus got, HushStatus want, const char *what) {
    const char *message = hush_last_error_message();
    if (got != want) {
        fprintf(stderr, "%s: got %s (%s), expected %s\n", what, hush_status_name(got), message,
                hush_status_name(want));
        failures++;
        return;
    }
    if (want != HUSH_STATUS_OK) {
        if (message == NULL || message[0] == '\0') {
            fprintf(stderr, "%s: %s without a message\n", what, hush_status_name(got));
            failures++;
            return;
        }
        printf("refused %s: %s\n", hush_status_name(got), message);
    }
}

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t le16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }

/*
 * Reads a 16-bit PCM or 32-bit float WAV file as mono floats in [-1, 1] (channels
 * averaged). Returns NULL on any error, with a message on stderr.
 */
static float *read_wav(const char *path, uint32_t *rate, size_t *count) {
    FILE *f = fopen(path, "rb");
    unsigned char *bytes = NULL;
    float *samples = NULL;
    long size;
    size_t at = 12, data = 0, data_len = 0, i;
    uint16_t format = 0, channels = 0, bits = 0;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 12 ||
        fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "%s: cannot read\n", path);
        goto done;
    }
    bytes = malloc((size_t)size);
    if (bytes == NULL || fread(bytes, 1, (size_t)size, f) != (size_t)size ||
        memcmp(bytes, "RIFF", 4) != 0 || memcmp(bytes + 8, "WAVE", 4) != 0) {
        fprintf(stderr, "%s: not a RIFF/WAVE file\n", path);
        goto done;
    }
    while (at + 8 <= (size_t)size) {
        size_t len = le32(bytes + at + 4), body = at + 8;
        if (len > (size_t)size - body) {
            len = (size_t)size - body;
        }
        if (memcmp(bytes + at, "fmt ", 4) == 0 && len >= 16) {
            format = le16(bytes + body);
            channels = le16(bytes + body + 2);
            *rate = le32(bytes + body + 4);
            bits = le16(bytes + body + 14);
        } else if (memcmp(bytes + at, "data", 4) == 0) {
            data = body;
            data_len = len;
        }
        at = body + len + (len & 1);
    }
    if (channels == 0 || data == 0 || !((format == 1 && bits == 16) || (format == 3 && bits == 32))) {
        fprintf(stderr, "%s: expected 16-bit PCM or 32-bit float samples\n", path);
        goto done;
    }
    *count = data_len / (bits / 8) / channels;
    samples = malloc((*count ? *count : 1) * sizeof(float));
    if (samples == NULL) {
        goto done;
    }
    for (i = 0; i < *count; i++) {
        float sum = 0.0f;
        uint16_t c;
        for (c = 0; c < channels; c++) {
            const unsigned char *p = bytes + data + (i * channels + c) * (bits / 8);
            if (format == 1) {
                sum += (float)(int16_t)le16(p) / 32768.0f;
            } else {
                uint32_t u = le32(p);
                float v;
                memcpy(&v, &u, sizeof v);
                sum += v;
            }
        }
        samples[i] = sum / (float)channels;
    }
done:
    if (f != NULL) {
        fclose(f);
    }
    free(bytes);
    return samples;
}

static size_t print_detections(const HushDetection *d, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) {
        printf("detection %.6f %s %u %.6f\n", d[i].time_s, d[i].label, d[i].label_index,
               (double)d[i].score);
    }
    return n;
}

int main(int argc, char **argv) {
    HushSpotter *spotter = NULL;
    HushDetection found[ROOM];
    uint32_t model_rate = 0, wav_rate = 0;
    size_t count = 0, at, n = 0, pending = 0, detections = 0;
    uint32_t version = hush_api_version();
    float *samples;

    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL_DIR FILE.wav\n", argv[0]);
        return 2;
    }
    printf("api %u.%u\n", version >> 16, version & 0xffff);
    if (version >> 16 != HUSH_API_VERSION_MAJOR) {
        fprintf(stderr, "built for API %u, linked with %u\n", HUSH_API_VERSION_MAJOR, version >> 16);
        return 1;
    }

    /* Misuse is answered with a status and a message, never a crash. */
    expect(hush_spotter_open(NULL, NULL, &spotter), HUSH_STATUS_NULL_POINTER, "open(NULL)");
    expect(hush_spotter_open(argv[1], NULL, NULL), HUSH_STATUS_NULL_POINTER, "open(out NULL)");
    expect(hush_spotter_open("/nonexistent/model", NULL, &spotter), HUSH_STATUS_NOT_FOUND,
           "open(missing)");
    if (spotter != NULL) {
        fprintf(stderr, "a failed open left a handle\n");
        failures++;
    }

    samples = read_wav(argv[2], &wav_rate, &count);
    if (samples == NULL) {
        return 1;
    }
    expect(hush_spotter_open(argv[1], NULL, &spotter), HUSH_STATUS_OK, "open");
    if (spotter == NULL) {
        free(samples);
        return 1;
    }
    expect(hush_spotter_sample_rate(spotter, &model_rate), HUSH_STATUS_OK, "sample_rate");
    expect(hush_spotter_push(spotter, samples, CHUNK, model_rate / 2, found, ROOM, &n),
           HUSH_STATUS_UNSUPPORTED_SAMPLE_RATE, "push(half rate)");
    expect(hush_spotter_push(spotter, NULL, CHUNK, model_rate, found, ROOM, &n),
           HUSH_STATUS_NULL_POINTER, "push(NULL)");
    expect(hush_spotter_push(spotter, samples, HUSH_MAX_PUSH_SAMPLES + 1, model_rate, found,
                             ROOM, &n),
           HUSH_STATUS_TOO_LONG, "push(too long)");

    /* The stream, 20 ms at a time. */
    for (at = 0; at < count; at += CHUNK) {
        size_t len = count - at < CHUNK ? count - at : CHUNK;
        HushStatus s = hush_spotter_push(spotter, samples + at, len, wav_rate, found, ROOM, &n);
        if (s != HUSH_STATUS_OK) {
            expect(s, HUSH_STATUS_OK, "push");
            break;
        }
        detections += print_detections(found, n);
    }
    /* Detections that did not fit wait for the next push; take them. */
    for (;;) {
        expect(hush_spotter_pending(spotter, &pending), HUSH_STATUS_OK, "pending");
        if (pending == 0) {
            break;
        }
        expect(hush_spotter_push(spotter, NULL, 0, model_rate, found, ROOM, &n), HUSH_STATUS_OK,
               "push(drain)");
        if (n == 0) {
            break;
        }
        detections += print_detections(found, n);
    }

    expect(hush_spotter_close(spotter), HUSH_STATUS_OK, "close");
    expect(hush_spotter_close(spotter), HUSH_STATUS_INVALID_HANDLE, "close(again)");
    printf("summary %zu detections in %.1f s\n", detections,
           model_rate ? (double)count / model_rate : 0.0);
    free(samples);
    return failures == 0 ? 0 : 1;
}
