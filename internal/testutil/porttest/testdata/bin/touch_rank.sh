#!/bin/sh
# A non-Python worker as PyTorch's launcher tests use one (bin/test_script.sh): touch DIR/<RANK>.
FILE="$1/$RANK"
echo "creating $FILE"
touch "$FILE"
