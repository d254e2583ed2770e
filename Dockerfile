# The trainflow binary: worker, prediction server and CLI in one image.
#   docker build -t trainflow:dev .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Pure Go (the embedded dev server's SQLite driver needs no cgo).
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/trainflow ./cmd/trainflow

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --create-home trainflow && mkdir -p /data && chown trainflow /data
COPY --from=build /out/trainflow /usr/local/bin/trainflow
USER trainflow
ENV TRAINFLOW_HOME=/data
ENTRYPOINT ["trainflow"]
CMD ["help"]
