FROM 127.0.0.1:5000/imagebuild-test/debian:bookworm AS base
RUN echo base > /base.txt

FROM base AS a
ARG PIN_A=1
RUN echo "a $PIN_A" > /a.txt && sleep 3

FROM base AS b
ARG PIN_B=1
RUN echo "b $PIN_B" > /b.txt && sleep 3

FROM base AS final
COPY --from=a /a.txt /a.txt
COPY --from=b /b.txt /b.txt
RUN cat /a.txt /b.txt > /ab.txt
